"""The quiz: the demo question bank (`bank`) and the chat tool that asks questions (`tools`)."""
