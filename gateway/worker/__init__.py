"""One process's share of the chats: the runner dispatches chats and drains each chat's inbox under its
fenced lock; every inbox entry is a :class:`~gateway.worker.turn.Turn` of named steps — snapshot,
command or hygiene, the agent, commit, deliver, finish — with its failures settled in one place.
"""
