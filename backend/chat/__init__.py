"""The chat: the streamed reply, the session the console holds, the conversation and its store, the context budget."""
