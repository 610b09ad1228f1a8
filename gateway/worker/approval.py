"""Asking the person before a tool runs (policy ``ask``): the question in the chat, the answer from any process.

The turn opens an approval in the store (:mod:`gateway.store.approvals`) that only the person whose message it
answers may answer, asks in the chat (buttons where the platform has them, commands where it does not), and
waits up to ``tools.confirm_timeout_seconds``: no answer is a no. The answer arrives through the intake, in
whichever process the platform delivers it to (:meth:`gateway.worker.intake.Admission.admit`), and the
question is then edited (or followed by a line) to say what was decided. A ``/stop`` ends the wait like any
tool call.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping
from typing import Any

from agent import json_codec
from agent.tools.mcp import SEPARATOR, Approval
from gateway.platforms.base import ApprovalPrompt, IncomingMessage, PlatformAdapter
from gateway.store.approvals import Approvals

log = logging.getLogger(__name__)

#: Characters of a call's arguments the question shows.
ARGUMENTS_SHOWN = 300


def question(server: str, tool: str, arguments: Mapping[str, Any], asker: str) -> str:
    shown = json_codec.dumps_text(dict(arguments), default=str)
    if len(shown) > ARGUMENTS_SHOWN:
        shown = shown[: ARGUMENTS_SHOWN - 1] + "…"
    who = (
        f"{asker}, may" if asker and asker != "you" else "May"
    )  # the terminal and the web chat call their person "you"
    return f"🔐 {who} I run {server}{SEPARATOR}{tool} {shown}?"


class ChatApprover:
    """``agent.tools.mcp.Approver`` for one turn: asks the person whose message the turn answers."""

    def __init__(
        self, approvals: Approvals, adapter: PlatformAdapter | None, message: IncomingMessage, timeout: float
    ) -> None:
        self.approvals = approvals
        self.adapter = adapter
        self.message = message
        self.timeout = timeout

    async def approve(self, server: str, tool: str, arguments: Mapping[str, Any]) -> Approval:
        message = self.message
        if self.adapter is None:
            return Approval(False, "nobody could be asked here")
        approval_id = await self.approvals.open(message.chat, asker=message.user_id, about=message.update_id)
        prompt = ApprovalPrompt(approval_id, question(server, tool, arguments, message.user_name))
        asked_in = await self.adapter.ask_approval(message.chat_id, prompt, reply_to=message.update_id)
        answer = await self.approvals.wait(message.chat, approval_id, self.timeout)
        if answer is None:
            outcome = Approval(False, f"no answer within {self.timeout:g} s, so it was not run")
        else:
            by = answer.user_name or answer.user_id or "the person"
            outcome = Approval(answer.approved, f"{'approved' if answer.approved else 'refused'} by {by}")
        log.info("%s: %s%s%s %s", message.chat, server, SEPARATOR, tool, outcome.said)
        with contextlib.suppress(Exception):  # the question is shown as asked; the decision stands either way
            await self.adapter.settle_approval(message.chat_id, asked_in, prompt, outcome.said)
        return outcome
