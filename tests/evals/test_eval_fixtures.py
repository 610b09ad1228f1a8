"""The session generator: reproducible, sized in exact tokens, realistic, with findable planted facts."""

from __future__ import annotations

import argparse
import collections
import json
import random
import re
import statistics
from pathlib import Path

import pytest

from agent.messages import api_problems
from agent.search import message_search_text
from agent.tokens import count_message, count_messages
from evals.compaction_eval import is_attributed
from evals.fixtures import generate, outputs
from evals.fixtures.facts import PLANTED_COMMIT_VERBS, RECIPES, Topic, plan_facts, plant_job_error, plant_sha
from evals.fixtures.lexicon import TOPIC_ASPECTS, make_world
from evals.fixtures.session import dumps_jsonl, generate_session
from tests.fakes.paths import EVAL_DATA

DATA = EVAL_DATA


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def message_text(message: dict) -> str:
    return (message.get("content") or "") + json.dumps(message.get("tool_calls") or "")


def test_same_seed_gives_identical_bytes_and_another_seed_does_not(tmp_path: Path) -> None:
    first, second, other = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    generate.main(["--out", str(first), "--sizes", "20k,30k", "--seed", "5"])
    generate.main(["--out", str(second), "--sizes", "20k,30k", "--seed", "5"])
    generate.main(["--out", str(other), "--sizes", "20k,30k", "--seed", "6"])
    names = sorted(path.name for path in first.iterdir())
    assert names == ["night-20k-s5.jsonl", "night-30k-s5.jsonl", "probes.jsonl"]
    for name in names:
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert (first / "night-20k-s5.jsonl").read_bytes() != (other / "night-20k-s6.jsonl").read_bytes()


def test_committed_fixtures_are_what_the_documented_command_writes(tmp_path: Path) -> None:
    generate.main(["--out", str(tmp_path), "--sizes", "50k", "--seed", "7", "--per-size", "2"])
    for path in sorted(DATA.iterdir()):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), (
            f"{path.name} is stale: regenerate with "
            "python -m evals.fixtures.generate --out evals/fixtures/data --sizes 50k --seed 7 --per-size 2"
        )


@pytest.mark.parametrize("target", [20_000, 50_000, 150_000])
def test_sizes_land_within_five_percent_in_exact_tokens(target: int) -> None:
    session = generate_session("sized", target, seed=11)
    assert abs(session.tokens - target) <= 0.05 * target
    assert count_messages(json.loads(line) for line in dumps_jsonl(session.messages).splitlines()) == session.tokens


def test_sessions_are_valid_tool_using_conversations_dominated_by_tool_output() -> None:
    session = generate_session("shape", 60_000, seed=3)
    messages = session.messages
    assert messages[0]["role"] == "system"
    assert api_problems(messages) == []
    assert len({message["_id"] for message in messages}) == len(messages)
    stamps = [message["_ts"] for message in messages]
    assert stamps == sorted(stamps)
    by_role = collections.Counter()
    for message in messages:
        by_role[message["role"]] += count_message(message)
    assert by_role["tool"] > 0.6 * sum(by_role.values())
    assert sum(1 for message in messages if message["role"] == "user") >= 8
    assert sum(1 for message in messages if message.get("tool_calls")) >= 10
    tools = {call["function"]["name"] for message in messages for call in message.get("tool_calls") or ()}
    assert {"terminal", "read_file"} <= tools


def test_text_is_varied_so_repetition_cannot_be_exploited() -> None:
    session = generate_session("varied", 150_000, seed=4)
    lines = [
        line for message in session.messages for line in (message.get("content") or "").splitlines() if len(line) > 40
    ]
    counts = collections.Counter(lines)
    assert len(counts) / len(lines) > 0.9
    assert counts.most_common(1)[0][1] < 0.01 * len(lines)


@pytest.mark.parametrize("path", sorted(DATA.glob("night-*.jsonl")), ids=lambda path: path.stem)
def test_each_committed_probe_answer_occurs_only_in_its_planted_message(path: Path) -> None:
    messages = read_jsonl(path)
    probes = [probe for probe in read_jsonl(DATA / "probes.jsonl") if probe["session"] == path.stem]
    assert len(probes) >= 15
    by_id = {message["_id"]: message for message in messages}
    for probe in probes:
        holders = [message["_id"] for message in messages if probe["answer"] in message_text(message)]
        assert holders == [probe["message_id"]], probe
        assert by_id[probe["message_id"]]["role"] == probe["where"], probe
        assert probe["query"] and probe["question"].endswith("?")
        # The subject says what the fact is about; it is never the answer, and the planted message has it beside
        # the answer.
        assert probe["subject"] and all(
            alternative.lower() != probe["answer"].lower() for alternative in probe["subject"]
        )
        assert is_attributed(message_search_text(by_id[probe["message_id"]]), probe["answer"], probe["subject"]), probe


def _lines_around(text: str, answer: str) -> tuple[str, str, str]:
    lines = text.splitlines()
    index = next(number for number, line in enumerate(lines) if answer in line)
    return lines[index - 1], lines[index], lines[index + 1]


def test_a_job_error_code_stands_on_a_bare_exception_line_with_the_job_and_frame_around_it() -> None:
    rng = random.Random(5)
    world = make_world(rng)
    for aspect in ("cutoff", "fan-out", "grace period"):
        topic = Topic(world.areas[0], aspect)
        planting = plant_job_error(rng, world, topic, "tool")
        before, line, after = _lines_around(planting.text, planting.answer)
        assert planting.where == "tool" and planting.tool == "terminal" and planting.kind == "job_error"
        assert line.endswith(f"[{planting.answer}]") and line.split(":")[0] in ("KeyError", "TypeError")
        assert topic.slug not in line and topic.subject not in line  # the exception line alone says nothing of the job
        assert f"job {topic.subject}_{topic.slug}_" in after  # the log line after the traceback names the job
        lines = planting.text.splitlines()
        frame = lines[lines.index(line) - 2]  # the last frame: where it ran, the line it ran, then the exception
        assert frame.startswith("  File ") and before.startswith("    ")
        assert f"{topic.subject}/{topic.slug}.py" in frame and frame.endswith(f"_{topic.subject}_{topic.slug}")
        assert any(f"{topic.words} job {topic.subject}_{topic.slug}_" in text and "crashed" in text for text in lines)
        assert is_attributed(planting.text, planting.answer, (topic.words,))
        assert not is_attributed(line, planting.answer, (topic.words,))


def test_a_planted_commit_in_a_scoped_git_log_looks_like_every_other_line_of_it() -> None:
    """``git log -- src/<area>``: the same scope and verbs on every line; only the asked-about aspect differs."""
    rng = random.Random(9)
    world = make_world(rng)
    topics = [Topic(world.areas[1], aspect) for aspect in TOPIC_ASPECTS[:12]]
    world.fact_topics.update((topic.subject, topic.aspect) for topic in topics)
    scoped = []
    for topic in topics:
        planting = plant_sha(rng, world, topic, "tool")
        if " -- src/" in planting.arguments["command"]:
            scoped.append((topic, planting))
    assert scoped
    for topic, planting in scoped:
        lines = planting.text.splitlines()
        planted = next(line for line in lines if line.startswith(planting.answer + " "))
        assert topic.words in planted and planting.question.endswith(f"of the {topic.words}?")
        others = [line for line in lines if line != planted]
        assert len(others) >= 12
        for line in lines:
            assert topic.subject in line.split(" ", 1)[1]
            assert any(f" {verb} " in line for verb in PLANTED_COMMIT_VERBS), line
        # Nothing but the aspect sets the planted line apart: no filler line is about a planted topic.
        assert not any(f"{area} {aspect}" in line for line in others for area, aspect in world.fact_topics)


def test_a_long_night_gets_at_most_one_fact_per_topic() -> None:
    rng = random.Random(2)
    world = make_world(rng)
    plantings = plan_facts(rng, world, 1_000)
    assert len(plantings) == len(world.areas) * len(TOPIC_ASPECTS) == len(world.fact_topics)
    assert all(planting.subject for planting in plantings)


def test_planted_commit_subjects_are_no_rarer_than_filler_commit_subjects() -> None:
    """A compressor ranking `git log` lines by rare words must not single out the planted commit."""

    def words(subject: str) -> set[str]:
        return set(re.findall(r"[a-z]+", subject.lower()))

    rng = random.Random(3)
    world = make_world(rng)
    topics = rng.sample([Topic(area, aspect) for area in world.areas for aspect in TOPIC_ASPECTS], 40)
    world.fact_topics.update((topic.subject, topic.aspect) for topic in topics)
    planted = [re.search(r': "(.*)"\. ', plant_sha(rng, world, topic, "assistant").text).group(1) for topic in topics]
    filler = [outputs.commit_subject(rng, world) for _ in range(3000)]
    counts = collections.Counter(word for subject in filler for word in words(subject))
    fresh = [outputs.commit_subject(rng, world) for _ in range(400)]

    def rarest(subject: str) -> int:
        return min(counts[word] for word in words(subject))

    assert all(rarest(subject) > 0 for subject in planted), [s for s in planted if rarest(s) == 0]
    assert statistics.median(map(rarest, planted)) >= statistics.median(map(rarest, fresh)) / 2
    assert not any(f"{area} {aspect}" in subject for subject in filler for area, aspect in world.fact_topics)


def test_facts_cover_every_kind_and_place_and_mostly_sit_in_the_compactable_part() -> None:
    probes = [probe for probe in read_jsonl(DATA / "probes.jsonl")]
    for session in {probe["session"] for probe in probes}:
        mine = [probe for probe in probes if probe["session"] == session]
        assert {probe["kind"] for probe in mine} == set(RECIPES)
        assert {probe["where"] for probe in mine} == {"user", "assistant", "tool"}
        early = sum(probe["at"] < 0.5 for probe in mine)
        assert early > len(mine) / 2
        assert max(probe["at"] for probe in mine) > 0.5  # some facts sit in the recent part too


def test_parse_size_accepts_suffixes_and_refuses_nonsense() -> None:
    assert generate.parse_size("50k") == 50_000
    assert generate.parse_size("1.5m") == 1_500_000
    assert generate.parse_size("12000") == 12_000
    with pytest.raises(argparse.ArgumentTypeError):
        generate.parse_size("lots")
    with pytest.raises(argparse.ArgumentTypeError):
        generate.parse_size("1k")
