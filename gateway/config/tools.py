"""``tools:`` — the MCP servers the agent may use, which chats may use them, and what each call may do.

A server is a command the gateway starts and talks to over stdio (``command``, ``args``, ``env``,
``cwd``), or a streamable HTTP endpoint (``url``, ``headers``). Values in ``env`` and ``headers``
may be written ``${NAME}``: the variable of foldgate's environment is put there when the server
starts, so a secret never sits in the file (a variable that is not set fails ``config check``
with the key that names it). A stdio server starts only from ``allowed_commands`` — never a
shell, never ``-c`` — with an environment that holds what ``env`` names and the SDK's minimum
to run a program (``HOME``, ``LOGNAME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``), nothing else
of foldgate's (no provider key).

A call whose policy is ``ask`` runs only once the person whose message the turn answers says yes
(buttons on Telegram, Discord and in the web chat, ``/approve <id>`` or ``/refuse <id>`` anywhere,
``y``/``n`` in the terminal); no answer within ``confirm_timeout_seconds`` is a no.

A server's tools reach only the chats a rule of ``allow`` names (by platform, by chat key; a rule
naming neither allows every chat): a public group does not get the owner's database tool.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import PurePath
from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from agent.settings import StrictModel
from agent.tools.mcp import McpServerSpec
from gateway.config.errors import require

#: What a tool call may do: run (``auto``), run once the person who asked says yes (``ask``), or never (``deny``).
ToolPolicy = Literal["auto", "ask", "deny"]
#: A server's name: it starts each of its tools' names (``<server>__<tool>``, at most 64 characters in all).
ServerName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9-]{0,23}$")]
#: Programs that read commands from text: a server started through one could be any program.
SHELLS = frozenset(
    {
        "sh",
        "bash",
        "zsh",
        "dash",
        "ksh",
        "fish",
        "csh",
        "tcsh",
        "cmd",
        "cmd.exe",
        "powershell",
        "pwsh",
        "env",
        "sudo",
        "xargs",
    }
)
#: Arguments that make an interpreter run a line of code: ``-c``, ``-Ic``, ``-cprint(1)``, ``-e``, ``--eval`` …
INLINE_CODE = re.compile(r"^-[ce]|^-[A-Za-z]{0,2}[ce][A-Za-z]{0,2}$|^--(?:eval|exec|command|print)(?:=|$)")
#: ``${NAME}`` in a value: the environment variable NAME.
VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def expand(value: str, environ: Mapping[str, str]) -> str:
    """``value`` with each ``${NAME}`` replaced by the variable; KeyError names a variable that is not set."""
    return VARIABLE.sub(lambda match: environ[match.group(1)], value)


def _unset(values: dict[str, str]) -> list[str]:
    return sorted({name for value in values.values() for name in VARIABLE.findall(value) if name not in os.environ})


class McpServerSettings(StrictModel):
    """``tools.mcp_servers.<name>`` — one MCP server: a command over stdio, or a streamable HTTP ``url``."""

    enabled: bool = True
    command: str | None = Field(None, min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    #: Longest a call may take before it is cancelled (the server is told) and the model gets an error.
    timeout_seconds: float = Field(60.0, gt=0, le=3600)
    #: Only these tools (empty: all of them), then not these.
    include: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    #: Every tool of the server unless ``tools`` says otherwise; unset, each tool's own hints decide (see README).
    policy: ToolPolicy | None = None
    tools: dict[str, ToolPolicy] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise PydanticCustomError("url", "must be an http:// or https:// URL, got {value!r}", {"value": value})
        return value

    @field_validator("args")
    @classmethod
    def _no_inline_code(cls, value: list[str]) -> list[str]:
        code = [arg for arg in value if INLINE_CODE.match(arg)]
        if code:
            raise PydanticCustomError(
                "inline_code",
                "must not hold {flags}: a server is a program, not a line of code",
                {"flags": ", ".join(code)},
            )
        if any(VARIABLE.search(arg) for arg in value):
            raise PydanticCustomError(
                "variable", "must not hold ${{NAME}}: only env and headers are read from the environment", {}
            )
        return value

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        problems = []
        if (self.command is None) == (self.url is None):
            problems.append(("command", "set either command (stdio) or url (streamable HTTP), not both"))
        if self.url is not None and (self.args or self.env or self.cwd):
            problems.append(("url", "args, env and cwd belong to a stdio server (command)"))
        if self.command is not None and self.headers:
            problems.append(("headers", "headers belong to an HTTP server (url)"))
        if self.url is not None and VARIABLE.search(self.url):
            problems.append(("url", "must not hold ${NAME}: put a secret in headers"))
        problems += [("env", f"${{{name}}} is not set in the environment") for name in _unset(self.env)]
        problems += [("headers", f"${{{name}}} is not set in the environment") for name in _unset(self.headers)]
        require(problems)
        return self

    def spec(self, name: str, environ: Mapping[str, str]) -> McpServerSpec:
        """The server as this process starts it, ``${NAME}`` values taken from ``environ``."""
        return McpServerSpec(
            name=name,
            command=self.command,
            args=tuple(self.args),
            env={key: expand(value, environ) for key, value in self.env.items()},
            cwd=self.cwd,
            url=self.url,
            headers={key: expand(value, environ) for key, value in self.headers.items()},
            timeout_seconds=self.timeout_seconds,
            include=frozenset(self.include),
            exclude=frozenset(self.exclude),
            server_policy=self.policy,
            tool_policies=dict(self.tools),
        )


class ToolAccessRule(StrictModel):
    """One entry of ``tools.allow``: these servers, in these platforms' chats or these chats (neither: every chat)."""

    servers: list[ServerName] = Field(min_length=1)
    platforms: list[Literal["tg", "dc", "web", "local", "api"]] = Field(default_factory=list)
    chats: list[Annotated[str, Field(pattern=r"^[a-z]+:.+$")]] = Field(default_factory=list)

    def allows(self, chat: str) -> bool:
        """Whether the rule covers ``chat`` (a chat key such as ``tg:123``)."""
        if not self.platforms and not self.chats:
            return True
        return chat in self.chats or chat.partition(":")[0] in self.platforms


class ToolsSettings(StrictModel):
    """``tools:`` — MCP servers for the agent, the programs they may be started with, and who may use them."""

    allowed_commands: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    mcp_servers: dict[ServerName, McpServerSettings] = Field(default_factory=dict)
    allow: list[ToolAccessRule] = Field(default_factory=list)
    #: How long a call whose policy is ``ask`` waits for the person's answer; no answer is a refusal.
    confirm_timeout_seconds: float = Field(120.0, gt=0, le=3600)

    @field_validator("allowed_commands")
    @classmethod
    def _no_shells(cls, value: list[str]) -> list[str]:
        shells = [command for command in value if PurePath(command).name in SHELLS]
        if shells:
            raise PydanticCustomError(
                "shell",
                "must not list a shell or launcher ({names}): a server started through one could be any program",
                {"names": ", ".join(shells)},
            )
        return value

    @model_validator(mode="after")
    def _known_commands_and_servers(self) -> ToolsSettings:
        problems = []
        for name, server in self.mcp_servers.items():
            if server.command is not None and server.command not in self.allowed_commands:
                problems.append(
                    (
                        f"mcp_servers.{name}.command",
                        f"{server.command!r} is not in tools.allowed_commands; add it there to let it start",
                    )
                )
        for index, rule in enumerate(self.allow):
            unknown = sorted(set(rule.servers) - set(self.mcp_servers))
            if unknown:
                problems.append(
                    (f"allow.{index}.servers", f"names no server of tools.mcp_servers: {', '.join(unknown)}")
                )
        require(problems)
        return self

    def specs(self, environ: Mapping[str, str]) -> list[McpServerSpec]:
        """Every enabled server as this process starts it."""
        return [server.spec(name, environ) for name, server in sorted(self.mcp_servers.items()) if server.enabled]

    def servers_for(self, chat: str) -> list[str]:
        """The enabled servers whose tools ``chat`` may use, in name order."""
        allowed = {server for rule in self.allow if rule.allows(chat) for server in rule.servers}
        return sorted(name for name, server in self.mcp_servers.items() if server.enabled and name in allowed)
