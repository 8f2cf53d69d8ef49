"""A deterministic simpy simulator of the distributed barrier protocol, running the real coordinator and real
state backends under a simulated network and clock."""
