"""The server's life: launch argv, the supervisor, the console's handle on it, the state file, vLLM's processes."""
