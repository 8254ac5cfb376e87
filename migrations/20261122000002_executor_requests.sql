-- Requests the universal executor creates are retried when answered; requests made
-- through the action API are not. The retry's outcome is kept with the request so the
-- agent loop can resume from it.
ALTER TABLE tool_user_input_requests
    ADD COLUMN origin text NOT NULL DEFAULT 'api' CHECK (origin IN ('api', 'executor')),
    ADD COLUMN original_user_request text,
    ADD COLUMN tool_result jsonb;
