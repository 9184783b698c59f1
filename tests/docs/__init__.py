"""The docs site build and the code blocks of README.md and docs/."""
