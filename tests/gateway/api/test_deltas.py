"""What of each whole-text preview a stream sends: only what is new, never anything twice."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.api.completions import Deltas
from gateway.api.requests import field_name


def test_a_growing_reply_is_sent_as_its_new_suffixes():
    deltas = Deltas()
    sent = [deltas.new_text(text, final=False) for text in ("He", "Hello", "Hello wor")]
    sent.append(deltas.new_text("Hello world", final=True))
    assert sent == ["He", "llo", " wor", "ld"]


def test_a_rewritten_preview_stops_the_deltas_until_the_final_text():
    deltas = Deltas()
    assert deltas.new_text("Looking it up", final=False) == "Looking it up"
    assert deltas.new_text("The answer", final=False) == ""
    assert deltas.new_text("Looking it up again", final=False) == ""  # nothing more until the final
    assert deltas.new_text("Looking it up: 42", final=True) == ": 42"


def test_a_final_text_that_does_not_extend_what_was_sent_adds_nothing():
    deltas = Deltas()
    deltas.new_text("Draft", final=False)
    assert deltas.new_text("Other", final=True) == ""


@given(st.lists(st.text(max_size=8), max_size=6), st.text(max_size=12))
def test_what_is_sent_is_always_a_prefix_of_some_frame_and_never_repeats(frames, final):
    deltas, assembled = Deltas(), ""
    for frame in frames:
        assembled += deltas.new_text(frame, final=False)
    assembled += deltas.new_text(final, final=True)
    assert assembled == deltas.sent
    assert final.startswith(assembled) or any(frame.startswith(assembled) for frame in frames)


def test_a_field_is_named_as_a_client_writes_it():
    assert field_name(("messages", 2, "role")) == "messages[2].role"
    assert field_name(("messages", 0, "content", "str")) == "messages[0].content"
    assert field_name(("messages", 0, "content", "list[tagged-union[TextPart,ImagePart]]", 0)) == "messages[0].content"
    assert field_name(()) == "body"
