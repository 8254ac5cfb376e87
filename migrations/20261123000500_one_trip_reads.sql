-- The two hot reads in one round trip. Each function sets the caller's identity the way
-- every API transaction does (role `toolgate_app` and `toolgate.user_id`, both
-- transaction-local) and then runs its query under row-level security. Called as a
-- single statement outside any explicit transaction, the identity ends with the
-- statement's own implicit transaction, so it cannot outlive the call on a pooled
-- connection. A conversation the caller cannot see answers `no_data_found`, so the
-- server can tell "nothing pending" from "not yours" without a second round trip.
-- Only the server's own login may call them: the identity is an argument here.

CREATE FUNCTION toolgate_pending_requests(caller text, conversation uuid)
RETURNS SETOF tool_user_input_requests
LANGUAGE plpgsql VOLATILE STRICT
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM set_config('role', 'toolgate_app', true),
            set_config('toolgate.user_id', caller, true);
    RETURN QUERY
        SELECT * FROM tool_user_input_requests r
        WHERE r.conversation_id = conversation AND r.status = 'pending'
          AND r.expires_at > now()
        ORDER BY r.created_at, r.id;
    IF NOT FOUND AND NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id = conversation) THEN
        RAISE EXCEPTION 'conversation not found' USING ERRCODE = 'no_data_found';
    END IF;
END
$$;

CREATE FUNCTION toolgate_session_values(caller text, conversation uuid)
RETURNS SETOF saved_tool_inputs
LANGUAGE plpgsql VOLATILE STRICT
SET search_path FROM CURRENT
AS $$
BEGIN
    PERFORM set_config('role', 'toolgate_app', true),
            set_config('toolgate.user_id', caller, true);
    IF NOT EXISTS (SELECT 1 FROM conversations c WHERE c.id = conversation) THEN
        RAISE EXCEPTION 'conversation not found' USING ERRCODE = 'no_data_found';
    END IF;
    RETURN QUERY
        SELECT * FROM saved_tool_inputs s
        WHERE s.conversation_id = conversation OR s.conversation_id IS NULL
        ORDER BY s.conversation_id NULLS LAST, s.binding;
END
$$;

REVOKE ALL ON FUNCTION toolgate_pending_requests(text, uuid) FROM PUBLIC;
REVOKE ALL ON FUNCTION toolgate_session_values(text, uuid) FROM PUBLIC;
