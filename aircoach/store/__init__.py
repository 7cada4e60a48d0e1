"""Store adapters: SQLite and MongoDB implementations of the features' ports
(`aircoach.turn.ports`, `aircoach.turn.guards`, `aircoach.quiz.ports`, `aircoach.tasks.ports`)
and the dead-letter spools. Only the composition root (`aircoach.services`) picks them."""
