"""Images are weighed by each provider's published rule, never as the text of their base64."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.tokens import (
    anthropic_image_tokens,
    content_text,
    count_message,
    count_text,
    estimate_message_tokens,
    image_tokens,
    message_image_tokens,
    openai_image_tokens,
)

#: OpenAI's vision guide (high detail): size -> tokens.
OPENAI_EXAMPLES = [
    ((1024, 1024), 765),  # 768×768: four tiles
    ((2048, 4096), 1105),  # 1024×2048, then 768×1536: six tiles
    ((512, 512), 255),  # one tile, never scaled up
    ((4096, 8192), 1105),  # fitted into 2048×2048 first
    ((100, 100), 255),
    ((1920, 1080), 1105),  # 1365×768: three by two tiles
]
#: Anthropic's vision guide: size -> about this many tokens (``w × h / 750``).
ANTHROPIC_EXAMPLES = [
    ((1092, 1092), 1590),
    ((1000, 1000), 1334),
    ((200, 200), 54),
    ((951, 1268), 1600),  # just over the ~1600 an image is scaled down to
    ((3000, 3000), 1600),  # long side fitted to 1568, still over: scaled to the cap
]


@pytest.mark.parametrize(("size", "tokens"), OPENAI_EXAMPLES)
def test_openai_high_detail_tiles(size, tokens):
    assert openai_image_tokens(*size) == tokens


@pytest.mark.parametrize(("size", "tokens"), ANTHROPIC_EXAMPLES)
def test_anthropic_pixel_rule(size, tokens):
    assert anthropic_image_tokens(*size) == tokens


def test_an_unknown_size_costs_the_most_an_image_can():
    assert openai_image_tokens(0, 0) == 1445  # 768×2048: eight tiles
    assert anthropic_image_tokens(0, 0) == 1600
    assert image_tokens(0, 0) == 1600


@given(st.integers(1, 10_000), st.integers(1, 10_000))
def test_the_route_unknown_takes_the_larger_rule(width, height):
    both = (image_tokens(width, height, "openai"), image_tokens(width, height, "anthropic"))
    assert image_tokens(width, height) == max(both)
    assert image_tokens(width, height, "openai") == openai_image_tokens(width, height)
    assert 85 < openai_image_tokens(width, height) <= 1445 and 0 < anthropic_image_tokens(width, height) <= 1600


def image(w: int, h: int, **extra) -> dict:
    return {
        "kind": "image",
        "sha": "a" * 64,
        "name": "photo.jpg",
        "mime": "image/jpeg",
        "bytes": 1,
        "file_id": "f",
        "w": w,
        "h": h,
        **extra,
    }


def test_a_message_counts_its_images_by_rule():
    plain = {"role": "user", "content": "look at these"}
    images = image_tokens(1024, 1024) + image_tokens(1092, 1092)
    assert images == 1399 + 1590  # the Anthropic rule is the larger for both
    carrying = {**plain, "_items": [image(1024, 1024), image(1092, 1092)]}
    assert estimate_message_tokens(carrying) == estimate_message_tokens(plain) + images  # nothing cached yet
    assert count_message(carrying) == count_message(plain) + images


def test_items_that_are_no_image_or_failed_cost_nothing_beyond_their_text():
    document = {"kind": "document", "sha": "b" * 64, "name": "invoice.pdf", "pages": 3}
    refused = image(4000, 3000, error="over the 20 MB limit")
    message = {"role": "user", "content": "[document invoice.pdf, 3 pages]\ntotal 42", "_items": [document, refused]}
    assert message_image_tokens(message) == 0
    assert count_message(message) == count_message({"role": "user", "content": message["content"]})


def test_an_image_part_is_no_text():
    data = base64.b64encode(bytes(range(256)) * 400).decode()
    content = [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{data}"}},
    ]
    assert content_text(content) == "what is this?"
    message = {"role": "user", "content": content}
    assert count_message(message) == 4 + count_text("what is this?") + image_tokens(0, 0)
    assert count_message({"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}) == 4 + 1600
