"""The edge: reading requests, the chat-completions handler, pass-through, and error rendering."""
