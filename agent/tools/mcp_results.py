"""What the model (and, for files, the person) gets of an MCP tool's result.

A result is its text parts, joined; its structured content as JSON when it has no text; images,
audio and embedded files kept through the turn's :class:`~agent.items.MediaSource` and handed to
the person as well as the model; a link as a line; an error result as the model's tool error.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from collections.abc import Mapping
from typing import Any

import mcp_types as types

from agent import json_codec
from agent.items import MediaSource
from agent.tools.registry import ToolOutput


async def tool_output(result: types.CallToolResult, media: MediaSource | None) -> ToolOutput:
    """What the model (and, for files, the person) gets of a result (see the module docstring)."""
    texts: list[str] = []
    items: list[dict[str, Any]] = []
    for number, block in enumerate(result.content, 1):
        text, kept = await _block(block, number, media)
        texts += [text] if text is not None else []
        items += [kept] if kept is not None and kept.get("sha") else []
    if not texts and result.structured_content is not None:
        texts.append(json_codec.dumps_text(result.structured_content, default=str))
    text = "\n".join(texts)
    if result.is_error:
        text = json_codec.dumps_text({"error": text or "the tool reported an error"})
    return ToolOutput(text, tuple(items), deliver=bool(items))


async def _block(
    block: types.ContentBlock, number: int, media: MediaSource | None
) -> tuple[str | None, dict[str, Any] | None]:
    """One part of a result (``number`` from 1): its line for the model (None: a kind it has no use for), and
    the ref of the file it held, once kept."""
    if isinstance(block, types.TextContent):
        return block.text, None
    if isinstance(block, (types.ImageContent, types.AudioContent)):
        name = f"{block.type}-{number}{mimetypes.guess_extension(block.mime_type) or ''}"
        kept = await _keep(block.data, block.mime_type, name, media)
        return _kept_line(kept, block.type), kept
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return f"[{resource.uri}]\n{resource.text}", None
        name = resource.uri.rstrip("/").rpartition("/")[2] or f"file-{number}"
        kept = await _keep(resource.blob, resource.mime_type or "application/octet-stream", name, media)
        return _kept_line(kept, "file"), kept
    if isinstance(block, types.ResourceLink):
        return f"[link: {block.name} {block.uri}]", None
    return None, None


async def _keep(data: str, mime: str, name: str, media: MediaSource | None) -> dict[str, Any]:
    """A file a tool returned (base64), kept for the chat; a ref with ``error`` when it could not be."""
    ref: dict[str, Any] = {
        "kind": "image" if mime.startswith("image/") else "document",
        "sha": "",
        "name": name,
        "mime": mime,
    }
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return {**ref, "error": "not valid base64"}
    if media is None:
        return {**ref, "bytes": len(raw), "error": "no media store to keep it in"}
    return dict(await media.keep(raw, mime=mime, name=name))


def _kept_line(ref: Mapping[str, Any], what: str) -> str:
    if ref.get("error"):
        return f"[{what} {ref.get('name')}: not kept: {ref['error']}]"
    return f"[{what} {ref.get('name')}: shown to the person]"
