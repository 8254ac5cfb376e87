-- A run a stopping server handed over between two steps: any replica resumes it at
-- once (its lease is already lapsed), where a run whose server died mid-step is failed.
ALTER TABLE agent_runs ADD COLUMN handed_over boolean NOT NULL DEFAULT false;
