-- Where a remembered value came from: a field the model may fill (`model_may_fill`),
-- whose card offered the model's value as the default (true), or a field only the user
-- fills (false). A value the model proposed never fills another field only the user
-- fills, even through a shared memory_key, and the mark travels with the value rather
-- than being read from the tools as they are configured later. Values remembered before
-- this column have no mark (null): they are judged by the tools' configuration, as
-- before.
ALTER TABLE saved_tool_inputs
    ADD COLUMN model_proposed boolean;
