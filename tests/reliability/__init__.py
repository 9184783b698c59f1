"""Re-execution safety (issue 9): the reliability repros and the state-machine test."""
