"""Delivery: replies shown as they stream, and the send budget every gateway process shares."""
