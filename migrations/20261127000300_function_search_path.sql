-- The one-round-trip reads switch to the role `toolgate_app` before they run their
-- queries. Their search path was taken as it stood when they were made, which for most
-- logins is `"$user", public`: once switched, `"$user"` names a schema called
-- `toolgate_app`, and temporary tables come first of all, so a schema or temporary
-- table of that name made by anyone could stand in for toolgate's own tables inside
-- them. Each now searches only the schema the tables live in, then temporary objects
-- last.
SELECT set_config('search_path', quote_ident(current_schema()) || ', pg_temp', true);

ALTER FUNCTION toolgate_pending_requests(text, uuid) SET search_path FROM CURRENT;
ALTER FUNCTION toolgate_session_values(text, uuid) SET search_path FROM CURRENT;
ALTER FUNCTION toolgate_step_inputs(text, uuid, integer, uuid, integer) SET search_path FROM CURRENT;
