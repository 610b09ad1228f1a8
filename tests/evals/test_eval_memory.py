"""The people's-memory eval, run small: its worlds are a fair yardstick (the same seed gives the same world, every
ground-truth line is in its message, said by its person, in a chat of theirs), its figures stay above the floors
measured when it was written, nothing of one person reaches another, and a memory that kept everything or a
block that leaked would be caught by it. Besides the tuned worlds, twice as many are said in the dev wordings the
memory is developed against (its two parts) and as many in blind held-out wordings nobody develops against: their
figures are reported beside the tuned ones, with floors of their own."""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json

import pytest

from evals import memory_eval
from evals.cli import memory_command
from evals.people_conversations import SETS, world

KINDS = {"name", "constraint", "fact", "preference", "instruction", "decision"}


@pytest.fixture(scope="module", params=["tuned", "dev", "dev-2", "held-out"])
def made(request):
    return world(3, 1, wordings=request.param)


def test_the_same_seed_gives_the_same_world_and_another_seed_another(made):
    again = world(3, 1, wordings=made.wordings)
    assert [s.messages for s in again.sessions] == [s.messages for s in made.sessions]
    assert again.said == made.said
    assert [s.messages for s in world(4, 1, wordings=made.wordings).sessions] != [s.messages for s in made.sessions]


def test_each_set_says_other_sentences_and_leaves_the_others_worlds_as_they_were():
    made = {name: world(3, 1, wordings=name) for name in SETS}
    assert [(w.name, w.wordings) for w in made.values()] == [
        ("world-3-1", "tuned"),
        ("dev-3-1", "dev"),
        ("dev-2-3-1", "dev-2"),
        ("held-out-3-1", "held-out"),
    ]
    for one in made.values():
        assert {s.kind for s in one.statements} == KINDS
        for other in made.values():
            if other is not one:
                assert not {s.text for s in one.said} & {s.text for s in other.said}
    # Making one set's world draws nothing from another's generator: each is unchanged.
    assert all(world(3, 1, wordings=name).said == one.said for name, one in made.items())


@pytest.mark.parametrize("wordings", ["dev-2", "held-out"])
def test_people_say_several_things_in_one_message_each_kept_apart_in_the_ground_truth(wordings):
    held = world(3, 1, wordings=wordings)
    by_message: dict[tuple[int, int], list] = {}
    for said in held.statements:
        by_message.setdefault((said.session, said.index), []).append(said)
    several = [saids for saids in by_message.values() if len(saids) > 1]
    assert len(several) == len(held.people)  # one such message each
    for saids in several:
        assert len({s.core for s in saids}) == len(saids) and len({s.text for s in saids}) == 1


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


# Floors for the dev and held-out sets (seed 1, 3 worlds: 6 dev ones, its two parts), a little under what was
# measured when the blind held-out set was written and the earlier one folded into dev: dev precision 100%, recall
# 69% (name 86%, fact 78%, constraint 74%, preference 63%, instruction 60%, decision 45%; no distractor kept);
# held-out precision 98%, recall 57% (instruction 81%, name 78%, constraint 57%, preference 54%, fact 50%, decision
# 44%; one hedge kept; 20 worlds: recall 57%, precision 96%, 15 hedges kept). The memory is being improved against
# the dev set, so its figures are expected to rise: the floors catch them getting worse, nothing more.
FLOORS = {
    "dev": {
        "precision": 0.95,
        "recall": 0.62,
        "kinds": {
            "constraint": 0.65,
            "decision": 0.38,
            "fact": 0.7,
            "instruction": 0.52,
            "name": 0.75,
            "preference": 0.55,
        },
        "kept": {},
    },
    "held_out": {
        "precision": 0.93,
        "recall": 0.5,
        "kinds": {
            "constraint": 0.5,
            "decision": 0.35,
            "fact": 0.42,
            "instruction": 0.7,
            "name": 0.65,
            "preference": 0.45,
        },
        "kept": {"hedge": 3},
    },
}


@pytest.fixture(scope="module")
def measured(tmp_path_factory, redis_url):
    out = tmp_path_factory.mktemp("memory")
    document, paths = memory_eval.main(3, 1, out, redis_url=redis_url)
    return document, json.loads(paths["json"].read_text()), paths["markdown"].read_text()


@pytest.mark.timeout(180)
@pytest.mark.parametrize("side", ["dev", "held_out"])
def test_dev_and_held_out_wordings_are_measured_beside_the_tuned_ones_above_their_own_floors(measured, side):
    document, saved, text = measured
    part, floors = saved[side], FLOORS[side]
    memory = part["memory"]
    assert part["leaks"] == 0 and part["leak_details"] == {"memory_block": [], "my_chats": []}
    assert memory["statements"] == sum(v["planted"] for v in memory["by_kind"].values()) > 50
    assert set(document["wordings"]["by_kind"]) == set(document["memory"]["by_kind"]) == set(memory["by_kind"])
    assert set(saved["wordings"]["all"]) == {"tuned", "dev", "held_out"}
    assert memory["precision"] >= floors["precision"] and memory["recall"] >= floors["recall"]
    low = {k: v["recall"] for k, v in memory["by_kind"].items() if v["recall"] < floors["kinds"][k]}
    assert low == {}
    assert all(v["precision"] is None or v["precision"] >= 0.95 for v in memory["by_kind"].values())
    # Distractors kept: only the kinds named in the floors, at most as many as they say.
    kept = {kind: d["kept"] for kind, d in memory["distractors"].items() if d["kept"]}
    assert all(n <= floors["kept"].get(kind, 0) for kind, n in kept.items()), kept
    label = "Held-out" if side == "held_out" else "Dev"
    assert "## Tuned, dev and held-out wordings" in text and f"### {label} statements no entry kept" in text


@pytest.mark.timeout(180)
def test_one_run_counts_the_leaks_of_all_three_sets_and_none_is_found(measured):
    _, saved, _ = measured
    assert saved["leaks"] == saved["dev"]["leaks"] == saved["held_out"]["leaks"] == 0
    assert saved["worlds"] == saved["held_out"]["worlds"] == 3 and saved["dev"]["worlds"] == 6  # dev: both parts


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
    assert saved["leaks"] == len(saved["leak_details"]["memory_block"]) > 0  # every set's leaks, together
    assert saved["held_out"]["leaks"] > 0 and saved["dev"]["leaks"] > 0
    assert saved["leaks"] > saved["held_out"]["leaks"] + saved["dev"]["leaks"]


def _on(redis_url, main):
    def run(*args, **options):
        return main(*args, **options, redis_url=redis_url)

    return run
