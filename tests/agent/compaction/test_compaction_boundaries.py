"""Phase 2: head, tail by token budget, protect_last_n, real-user guarantee, tool-pair alignment, summary role."""

from agent.compaction.boundaries import (
    align_boundary_backward,
    budget_walk,
    choose_summary_role,
    head_end,
    plan_boundaries,
)
from agent.tokens import count_message
from tests.fakes.histories import Transcript


def plan(messages, *, budget=1_000, last_n=2, users=1, max_tail=None):
    counts = [count_message(m) for m in messages]
    return plan_boundaries(
        messages,
        counts,
        protect_first_n=3,
        tail_budget=budget,
        protect_last_n=last_n,
        min_tail_user_messages=users,
        max_tail_tokens=max_tail,
    )


def long_chat(turns=10, words=50):
    t = Transcript()
    for i in range(turns):
        t.exchange(f"question {i} " + "word " * words, f"answer {i} " + "word " * words)
    return t


def test_head_is_system_prompt_and_first_exchange():
    t = long_chat()
    assert head_end(t.messages, 3) == 3
    no_system = Transcript(system=None)
    no_system.exchange("a", "b")
    no_system.exchange("c", "d")
    assert head_end(no_system.messages, 3) == 2


def test_head_takes_the_first_exchanges_tool_results_along():
    t = Transcript()
    t.user("start")
    t.call("read_file", {"path": "a.py"}, "one", "two")
    t.exchange("more", "done")
    assert head_end(t.messages, 3) == 5


def test_budget_walk_keeps_the_longest_suffix_within_budget():
    assert budget_walk([10, 10, 10, 10], 0, 25) == 2
    assert budget_walk([10, 10, 10, 10], 0, 1000) == 0
    assert budget_walk([10, 10, 10, 10], 1, 1000) == 1
    assert budget_walk([10, 10, 10, 50], 0, 25) == 4


def test_tail_follows_the_token_budget():
    t = long_chat(turns=20)
    per_message = count_message(t.messages[-1])
    boundaries = plan(t.messages, budget=per_message * 5 + 5, last_n=2)
    assert len(t.messages) - boundaries.tail_start == 5
    # a budget ending on a user message takes the assistant reply before it along: the summary
    # between the head's assistant and the tail needs a role different from both neighbours
    boundaries = plan(t.messages, budget=per_message * 6 + 5, last_n=2)
    assert len(t.messages) - boundaries.tail_start == 7


def test_protect_last_n_wins_when_the_budget_protects_fewer():
    t = long_chat(turns=20)
    boundaries = plan(t.messages, budget=1, last_n=9)
    assert len(t.messages) - boundaries.tail_start == 9


def test_protect_last_n_yields_to_the_tail_ceiling():
    t = long_chat(turns=20)
    per_message = count_message(t.messages[-1])
    boundaries = plan(t.messages, budget=1, last_n=30, max_tail=per_message * 3 + 5)
    assert len(t.messages) - boundaries.tail_start == 3


def test_min_tail_user_messages_wins_over_the_budget():
    t = long_chat(turns=3)
    t.user("the real question")
    for i in range(12):
        t.call("run", {"i": i}, "x" * 400)
    boundaries = plan(t.messages, budget=50, last_n=2, users=1)
    question = next(i for i, m in enumerate(t.messages) if m["content"] == "the real question")
    assert boundaries.tail_start in (question, question - 1)
    boundaries = plan(t.messages, budget=50, last_n=2, users=2)
    tail = t.messages[boundaries.tail_start :]
    assert sum(1 for m in tail if m["role"] == "user") == 2


def test_service_echoes_and_summaries_do_not_count_as_user_messages():
    t = long_chat(turns=3)
    t.user("real one")
    t.assistant("ok")
    t.user("")  # empty service echo
    t.user("[CONTEXT COMPACTION] old notes", _compressed_summary=True)
    t.user("continue", _synthetic=True)
    boundaries = plan(t.messages, budget=1, last_n=1, users=1)
    real = next(i for i, m in enumerate(t.messages) if m["content"] == "real one")
    assert boundaries.tail_start in (real, real - 1)


def test_tail_never_starts_on_a_tool_result():
    t = long_chat(turns=3)
    t.user("go")
    t.call("search", {"q": "x"}, "r1", "r2", "r3")
    t.assistant("found it")
    index = len(t.messages) - 2  # the last tool result
    assert align_boundary_backward(t.messages, index, 3) == index - 3
    for budget in range(1, 200, 7):
        boundaries = plan(t.messages, budget=budget, last_n=1)
        assert t.messages[boundaries.tail_start]["role"] != "tool"


def test_a_pending_call_at_the_end_stays_in_the_tail_with_its_partial_results():
    t = long_chat(turns=4)
    t.user("do it")
    call_id = t.pending_call("deploy", {"env": "prod"})
    boundaries = plan(t.messages, budget=1, last_n=1)
    tail = t.messages[boundaries.tail_start :]
    assert any(call_id in str(m.get("tool_calls")) for m in tail)


def test_summary_role_differs_from_both_neighbours():
    assert choose_summary_role("assistant", "assistant") == "user"
    assert choose_summary_role("tool", "user") == "assistant"
    assert choose_summary_role("system", "assistant") == "user"
    assert choose_summary_role("assistant", "user") is None


def test_tail_grows_back_when_no_role_fits_between_head_and_tail():
    t = long_chat(turns=6)
    # head ends with the assistant; a tail starting on a user message leaves no role for the summary
    boundaries = plan(t.messages, budget=1, last_n=2)
    previous = t.messages[boundaries.head_end - 1]["role"]
    following = t.messages[boundaries.tail_start]["role"]
    assert boundaries.summary_role not in (previous, following)
    assert following == "assistant"


def test_an_overnight_backlog_of_user_messages_is_compactable():
    t = long_chat(turns=1)
    for i in range(30):
        t.user(f"backlog {i} " + "word " * 30)
    boundaries = plan(t.messages, budget=200, last_n=2)
    assert boundaries is not None and boundaries.tail_start > 20
    assert boundaries.summary_role == "user"  # takes the place of the backlog message before the cut


def test_nothing_to_compact_in_a_short_session():
    t = long_chat(turns=1)
    assert plan(t.messages, budget=1, last_n=20) is None


def test_planning_counts_estimate_the_middle_and_cut_where_exact_counts_would():
    from agent.compaction.boundaries import planning_counts
    from tests.fakes.histories import long_session

    for budget, last_n in [(2_000, 4), (10_000, 20), (25_000, 2)]:
        raw = long_session(120_000, seed=budget).messages
        for message in raw:
            message.pop("_tok", None)  # as read from a file
        counts = planning_counts(raw, tail_budget=budget, protect_last_n=last_n)
        untouched = [m for m in raw if "_tok" not in m]
        assert len(untouched) > len(raw) // 2  # the middle was estimated, not tokenized
        options = dict(
            protect_first_n=3,
            tail_budget=budget,
            protect_last_n=last_n,
            min_tail_user_messages=2,
            max_tail_tokens=60_000,
        )
        exact = [count_message(m) for m in raw]
        assert plan_boundaries(raw, counts, **options) == plan_boundaries(raw, exact, **options)
        assert abs(sum(counts) - sum(exact)) < 0.35 * sum(exact)
