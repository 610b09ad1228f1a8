"""What people send besides text: photos, documents, voice and other audio.

One module each, in the order an item passes through them:

- :mod:`~gateway.media.download` — a streamed download that stops at a byte limit
- :mod:`~gateway.media.images` — an image's size, scaled and re-encoded for the providers (Pillow)
- :mod:`~gateway.media.extract` — a document's text: PDFs (pypdf), text files (charset-normalizer)
- :mod:`~gateway.media.transcribe` — voice to text through an OpenAI-compatible endpoint
- :mod:`~gateway.media.lines` — what the model reads about an item in the message's text
- :mod:`~gateway.media.intake` — :func:`take_in`: one item in, its ref and its text out, never raising for bad input
- :mod:`~gateway.media.message` — a message's items taken in: its content, its refs, what to tell the person
- :mod:`~gateway.media.source` — one chat's stored bytes as the agent's media source
- :mod:`~gateway.media.errors`, :mod:`~gateway.media.units` — what a refusal says, in people's units

The bytes themselves are kept by :class:`gateway.store.media.MediaStore`. Nothing is imported here:
the errors sit below the platforms, which the rest sits above.
"""
