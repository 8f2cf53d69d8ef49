"""Reference implementations of statecert's contracts: what "correct" means, in code."""
