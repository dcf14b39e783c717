"""Where units run: this process (local), local shard processes, later a Ray cluster."""
