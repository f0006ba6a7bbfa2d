"""The relay: every appended event, once and in position order, into a NATS JetStream
stream (docs/relay.md). ``subjects`` and ``messages`` say what is sent, ``log`` what is
read of the log and where the relay's checkpoint lives, ``relay`` how it is sent."""
