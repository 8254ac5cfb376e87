-- A row that points at a conversation must point at one of its owner's: the owner
-- policies' WITH CHECK now also looks the conversation up, so even a handler that
-- forgets to check cannot attach a row to another user's conversation.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['messages', 'agent_runs', 'tool_user_input_requests',
                             'saved_tool_inputs', 'tool_call_log', 'run_events',
                             'conversation_summaries']
    LOOP
        EXECUTE format(
            'ALTER POLICY %I ON %I WITH CHECK ('
            '  user_id = nullif(current_setting(''toolgate.user_id'', true), '''')'
            '  AND (conversation_id IS NULL OR EXISTS ('
            '    SELECT 1 FROM conversations c WHERE c.id = conversation_id'
            '      AND c.user_id = nullif(current_setting(''toolgate.user_id'', true), ''''))))',
            t || '_owner', t);
    END LOOP;
END
$$;
