"""Test doubles that are real implementations: servers on loopback speaking the real protocols."""
