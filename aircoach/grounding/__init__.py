"""Grounded answers: the citations an answer makes, checked against what the turn's context
says (`guard`), follow-ups that retrieve the right thing (`followups`), what each tool
returned (`retrieval`), and students' feedback on answers (`feedback`)."""
