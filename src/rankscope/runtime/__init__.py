"""The backbone every feature stands on: context, hub, probe, and the CLI's client."""
