-- Conversations can be deleted (DELETE /api/conversations/{id}), with what they hold.
-- The log of the tool calls made in one is the record of what ran and who approved it:
-- it stays, its conversation unset, rather than going with the conversation.
ALTER TABLE tool_call_log DROP CONSTRAINT tool_call_log_conversation_id_fkey;
-- NOT VALID: the rows there were checked by the key it replaces, and a check of them
-- all would hold both tables locked while it read the whole log.
ALTER TABLE tool_call_log ADD CONSTRAINT tool_call_log_conversation_id_fkey
    FOREIGN KEY (conversation_id) REFERENCES conversations (id) ON DELETE SET NULL NOT VALID;

-- The deletion's cascade finds a conversation's saved values by this, not by reading
-- every user's.
CREATE INDEX saved_tool_inputs_conversation ON saved_tool_inputs (conversation_id)
    WHERE conversation_id IS NOT NULL;
