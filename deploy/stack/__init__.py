"""The production-shaped stack on one machine (`make stack-up`, `make stack-down`)."""
