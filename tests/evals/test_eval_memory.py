"""The people's-memory eval, run small: its worlds are a fair yardstick (the same seed gives the same world, every
ground-truth line is in its message, said by its person, in a chat of theirs), its figures stay above the floors
measured when it was written, nothing of one person reaches another, and a memory that kept everything or a
block that leaked would be caught by it. Half its worlds are said in held-out wordings no memory pattern was tuned
on: their figures are reported beside the tuned ones, with floors of their own."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json

import pytest

from evals import memory_eval
from evals.cli import memory_command
from evals.people_conversations import world


@pytest.fixture(scope="module", params=[False, True], ids=["tuned", "held-out"])
def made(request):
    return world(3, 1, held_out=request.param)


def test_the_same_seed_gives_the_same_world_and_another_seed_another(made):
    held_out = made.wordings == "held-out"
    again = world(3, 1, held_out=held_out)
    assert [s.messages for s in again.sessions] == [s.messages for s in made.sessions]
    assert again.said == made.said
    assert [s.messages for s in world(4, 1, held_out=held_out).sessions] != [s.messages for s in made.sessions]


def test_held_out_worlds_say_other_sentences_and_leave_the_tuned_worlds_as_they_were():
    tuned, held = world(3, 1), world(3, 1, held_out=True)
    assert (tuned.name, tuned.wordings, held.wordings) == ("world-3-1", "tuned", "held-out")
    assert not {s.wording for s in tuned.statements} & {s.wording for s in held.statements}
    assert {s.kind for s in held.statements} == {"name", "constraint", "fact", "preference", "instruction", "decision"}
    # Making a held-out world draws nothing from a tuned one's generator: the tuned world is unchanged.
    assert world(3, 1).said == tuned.said


def test_a_world_is_people_with_private_chats_and_groups_and_conversations_days_apart(made):
    assert 3 <= len(made.people) <= 5 and len(made.groups) == 2
    keys = {p.key for p in made.people}
    assert set(next(iter(made.groups.values()))) == keys  # everyone is in the first group
    for chat in [*keys, *made.groups]:
        starts = [s.start for s in made.sessions if s.chat == chat]
        assert len(starts) >= 3 and all(b - a >= 86_400 for a, b in zip(starts, starts[1:]))
        writers = {m["_user"] for s in made.sessions if s.chat == chat for m in s.messages if m.get("_user")}
        assert writers <= set(made.groups.get(chat, [chat]))
    asking = [s for s in made.sessions if s.asking]
    assert sorted(s.chat for s in asking) == sorted(keys)
    assert all(s.start == max(t.start for t in made.sessions if t.chat == s.chat) for s in asking)


def test_every_planted_line_is_said_once_by_its_person_in_a_chat_of_theirs(made):
    kinds = {s.kind for s in made.statements}
    assert {"constraint", "fact", "preference"} <= kinds
    assert {s.kind for s in made.said if not s.planted} >= {"someone else's", "question", "quoted", "injection"}
    for said in made.said:
        session = made.sessions[said.session]
        message = session.messages[said.index]
        assert said.text in message["content"] and message["_user"] == said.person
        assert said.chat == session.chat and said.chat in made.chats_of(said.person)
        assert not session.asking and said.index < len(session.messages) - memory_eval.KEEP_LIVE
    every = [m["content"] for s in made.sessions for m in s.messages]
    for said in made.statements:
        assert sum(said.core in text for text in every) == 1  # a statement is said once
        assert said.core in said.text and said.question.endswith("?")
    days = {dt.datetime.fromtimestamp(m["_ts"], dt.UTC).date() for s in made.sessions for m in s.messages}
    assert (max(days) - min(days)).days >= 14


@pytest.mark.timeout(120)
def test_the_eval_runs_end_to_end_without_leaks_and_above_its_floors(tmp_path, redis_url):
    document, paths = memory_eval.main(3, 1, tmp_path, redis_url=redis_url)
    saved = json.loads(paths["json"].read_text())
    assert saved["leaks"] == 0 and saved["leak_details"] == {"memory_block": [], "my_chats": []}
    memory, search = saved["memory"], saved["search"]
    assert memory["statements"] == sum(v["planted"] for v in memory["by_kind"].values()) > 50
    # Measured when written (seeds 1-3, 3 to 20 worlds): precision 100%, recall 81-85%.
    assert memory["precision"] >= 0.95 and memory["recall"] >= 0.7
    assert all(d["kept"] == 0 for d in memory["distractors"].values())
    # Measured: my chats 54-62% at 5, this chat 32-36%; what was said in a group is never found from "this chat".
    mine, here = search["all"]["my_chats"]["recall@5"], search["all"]["this_chat"]["recall@5"]
    assert mine >= 0.45 and here < mine
    assert search["said_in_a_group"]["this_chat"]["recall@10"] == 0
    assert saved["blocks"]["own_entries_carried"] == saved["blocks"]["own_entries"] == memory["entries"]
    assert "| all |" in paths["markdown"].read_text() and document["seconds"] > 0


@pytest.mark.timeout(120)
def test_held_out_wordings_are_measured_beside_the_tuned_ones_above_their_own_floors(tmp_path, redis_url):
    document, paths = memory_eval.main(3, 1, tmp_path, redis_url=redis_url)
    held = json.loads(paths["json"].read_text())["held_out"]
    memory = held["memory"]
    assert held["leaks"] == 0 and memory["statements"] > 50
    assert set(document["wordings"]["by_kind"]) == set(document["memory"]["by_kind"]) == set(memory["by_kind"])
    # Measured when written (seed 1, 3 worlds): precision 100%, recall 24% (20 worlds: 21%); by kind constraint
    # 33%, fact 33%, preference 25%, instruction 17%, name 12%, decision 0%. What no pattern was tuned on is
    # mostly missed: these floors catch it getting worse, and say nothing good about it.
    assert memory["precision"] >= 0.95 and memory["recall"] >= 0.2
    floors = {"constraint": 0.25, "fact": 0.25, "preference": 0.2, "instruction": 0.1, "name": 0.1, "decision": 0.0}
    assert {k: v["recall"] for k, v in memory["by_kind"].items() if v["recall"] < floors[k]} == {}
    # Measured: no held-out distractor kept; each one kept is named here.
    assert held["false_entries"] == [] and all(d["kept"] == 0 for d in memory["distractors"].values())
    text = paths["markdown"].read_text()
    assert "## Tuned and held-out wordings" in text and "### Held-out statements no entry kept" in text


@pytest.mark.timeout(120)
def test_a_memory_keeping_every_line_loses_precision_and_keeps_distractors(tmp_path, redis_url, monkeypatch):
    from agent.compaction.memory_notes import MemoryNote
    from gateway.memory import folds

    def everything(folded, limit_per_person=20):
        return [
            MemoryNote(m["_user"], f'"{m["content"]}"', m["_id"]) for m in folded if m.get("_user") and m.get("_id")
        ]

    monkeypatch.setattr(folds, "memory_notes", everything)
    document, _ = memory_eval.main(1, 1, tmp_path, redis_url=redis_url)
    assert document["memory"]["precision"] < 0.5
    assert all(d["kept"] == d["planted"] for d in document["memory"]["distractors"].values())
    assert document["memory"]["small_talk_entries"] > 0


@pytest.mark.timeout(120)
def test_a_block_carrying_another_persons_entries_is_a_leak_and_fails_the_command(tmp_path, redis_url, monkeypatch):
    from gateway.memory.block import MemoryReader

    honest = MemoryReader.block

    async def leaky(self, message, meta, window):
        block = await honest(self, message, meta, window)
        first = await self.store.entries(f"tg:{10_000}")
        return dataclasses.replace(block, note=block.note + "\n".join(e.text for e in first))

    monkeypatch.setattr(MemoryReader, "block", leaky)
    args = argparse.Namespace(worlds=1, seed=1, out=str(tmp_path))
    monkeypatch.setattr(memory_eval, "main", _on(redis_url, memory_eval.main))
    assert memory_command(args) == 1
    saved = json.loads((tmp_path / "memory_eval.json").read_text())
    assert saved["leaks"] == len(saved["leak_details"]["memory_block"]) > 0  # both halves' leaks, together
    assert saved["held_out"]["leaks"] > 0 and saved["leaks"] > saved["held_out"]["leaks"]


def _on(redis_url, main):
    def run(*args, **options):
        return main(*args, **options, redis_url=redis_url)

    return run
