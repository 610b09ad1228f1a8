"""People's memory as the turns use it: where an entry applies (:mod:`.scopes`), the block a request carries
(:mod:`.block`), what a compaction keeps of what it folds (:mod:`.folds`) and the model's tools (:mod:`.tools`).

The entries themselves are kept by :mod:`gateway.store.memory`; the person's own commands are in
:mod:`gateway.commands.memory`.
"""
