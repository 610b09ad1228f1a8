"""One process's share of the chats: the intake admits what the platforms hand in, the runner dispatches
chats and drains each chat's inbox under its fenced lock, and every inbox entry is a
:class:`~gateway.worker.turn.Turn` of named steps — snapshot, command or preparing, the agent, commit,
report, deliver, finish — with its failures settled in one place.
"""
