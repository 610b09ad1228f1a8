"""A fake model server on loopback that says which models it serves, and with what window, as each real one does.

``flavor`` picks whose API it speaks, with each server's real paths and shapes:

- ``openrouter``: ``GET /api/v1/models`` — ``context_length`` and ``top_provider.context_length``;
- ``vllm``: ``GET /v1/models`` — ``max_model_len`` (``owned_by: "vllm"``);
- ``llamacpp``: ``GET /v1/models`` and ``/models`` — ``meta.n_ctx_train`` (and, like newer builds,
  ``meta.n_ctx``), ``GET /props`` — ``default_generation_settings.n_ctx``, one slot's share of the
  context; ``llama_router=True`` lists every model with a ``status`` and wants ``?model=`` on ``/props``;
- ``lmstudio``: ``GET /v1/models`` (no window, ``owned_by: "organization_owner"``), ``GET /api/v0/models``
  and ``/api/v0/models/{id}`` — ``max_context_length``, and ``loaded_context_length`` once loaded;
- ``ollama``: ``GET /v1/models``, ``GET /api/ps`` (loaded models, ``context_length``), ``POST /api/show``
  (``parameters`` text and ``model_info["<arch>.context_length"]``), ``GET /api/version``;
- ``anthropic``: ``GET /v1/models`` and ``/v1/models/{id}`` — ``max_input_tokens``; it wants ``x-api-key``
  (when ``api_key`` is set) and ``anthropic-version`` like the real API;
- ``openai``: ``GET /v1/models`` and nothing else: a plain OpenAI-compatible server that states no window.

Each model is a :class:`ServedModel`: ``trained`` is what the model was trained for, ``loaded`` the window
it runs with once loaded (None: not loaded), ``num_ctx`` Ollama's Modelfile parameter; ``fields`` are
merged over its list entry, to plant nonsense. Faults: ``api_key`` (anything else is answered 401 the way
the flavor's server answers it), ``malformed`` (every JSON answer cut off mid-way), ``hang`` (requests are
accepted and never answered until the server stops). Every request is recorded in :attr:`requests` as it
arrives, ``(method, path with query)``.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import web

CatalogFlavor = Literal["openrouter", "vllm", "llamacpp", "lmstudio", "ollama", "anthropic", "openai"]

_CREATED = 1_750_000_000
_Handler = Callable[[web.Request], Awaitable[web.Response]]


@dataclass
class ServedModel:
    """One model the server serves (see the module docstring)."""

    id: str
    trained: int = 32_768
    loaded: int | None = None
    num_ctx: int | None = None
    remote: bool = False
    fields: dict[str, Any] = field(default_factory=dict)
    aliases: list[str] = field(default_factory=list)


class FakeModelCatalog:
    """Use as ``async with FakeModelCatalog("ollama", [ServedModel(...)]) as server``; ask ``server.base_url``."""

    def __init__(
        self,
        flavor: CatalogFlavor,
        models: list[ServedModel],
        *,
        api_key: str | None = None,
        malformed: bool = False,
        hang: bool = False,
        slots: int = 1,
        meta_n_ctx: bool = True,
        props: bool = True,
        llama_router: bool = False,
        ollama_version: str = "0.12.6",
    ) -> None:
        self.flavor = flavor
        self.models = models
        self.api_key = api_key
        self.malformed = malformed
        self.hang = hang
        self.slots = slots
        self.meta_n_ctx = meta_n_ctx
        self.props = props
        self.llama_router = llama_router
        self.ollama_version = ollama_version
        self.requests: list[tuple[str, str]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self._stopping = asyncio.Event()

    async def __aenter__(self) -> FakeModelCatalog:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What foldgate is configured with for this server."""
        if self.flavor == "openrouter":
            return self.url + "/api/v1"
        return self.url if self.flavor == "anthropic" else self.url + "/v1"

    @property
    def paths(self) -> list[str]:
        return [path for _method, path in self.requests]

    # -- dispatch ------------------------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        self.requests.append((request.method, request.path_qs))
        if self.hang:
            await self._stopping.wait()
            return web.Response(status=503)
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        route = self._routes().get((request.method, request.path))
        if route is not None:
            return await route(request)
        if request.method == "GET" and request.path.startswith(self._single_prefix()):
            return self._single(request.path[len(self._single_prefix()) :])
        return self._json(404, self._not_found_body(request))

    def _routes(self) -> dict[tuple[str, str], _Handler]:
        lists = {"openrouter": ["/api/v1/models"], "llamacpp": ["/v1/models", "/models"]}
        list_paths = lists.get(self.flavor, ["/v1/models"])
        routes: dict[tuple[str, str], _Handler] = {("GET", path): self._list for path in list_paths}
        if self.flavor == "llamacpp" and self.props:
            routes[("GET", "/props")] = self._props
        if self.flavor == "lmstudio":
            routes[("GET", "/api/v0/models")] = self._lm_studio_list
        if self.flavor == "ollama":
            routes.update(
                {
                    ("GET", "/api/ps"): self._ollama_ps,
                    ("POST", "/api/show"): self._ollama_show,
                    ("GET", "/api/version"): self._ollama_version,
                }
            )
        return routes

    def _single_prefix(self) -> str:
        return {"lmstudio": "/api/v0/models/", "anthropic": "/v1/models/"}.get(self.flavor, "/v1/models/")

    def _refusal(self, request: web.Request) -> web.Response | None:
        if self.flavor == "anthropic":
            if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
                return self._json(
                    401, {"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}
                )
            if "anthropic-version" not in request.headers:
                return self._json(
                    400,
                    {
                        "type": "error",
                        "error": {"type": "invalid_request_error", "message": "anthropic-version: header is required"},
                    },
                )
            return None
        if self.api_key is None or request.headers.get("authorization") == f"Bearer {self.api_key}":
            return None
        if self.flavor == "openrouter":
            return self._json(401, {"error": {"message": "No cookie auth credentials found", "code": 401}})
        return self._json(
            401,
            {
                "error": {
                    "message": "Incorrect API key provided.",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "invalid_api_key",
                }
            },
        )

    def _json(self, status: int, body: Any) -> web.Response:
        text = json.dumps(body)
        if self.malformed and status < 300:
            text = text[: max(1, len(text) // 2)]
        return web.Response(status=status, text=text, content_type="application/json")

    def _not_found_body(self, request: web.Request) -> Any:
        if self.flavor == "ollama":
            return {"error": "404 page not found"}
        if self.flavor == "anthropic":
            return {"type": "error", "error": {"type": "not_found_error", "message": f"model: {request.path}"}}
        return {
            "error": {
                "message": f"Invalid URL ({request.method} {request.path})",
                "type": "invalid_request_error",
                "param": None,
                "code": None,
            }
        }

    def _served(self, name: str) -> ServedModel | None:
        return next((model for model in self.models if model.id == name or name in model.aliases), None)

    # -- the OpenAI-compatible list ------------------------------------------------------------

    async def _list(self, request: web.Request) -> web.Response:
        entries = [{**self._entry(model), **model.fields} for model in self._listed()]
        if self.flavor == "openrouter":
            return self._json(200, {"data": entries})
        if self.flavor == "anthropic":
            ids = [entry["id"] for entry in entries]
            return self._json(
                200,
                {
                    "data": entries,
                    "has_more": False,
                    "first_id": ids[0] if ids else None,
                    "last_id": ids[-1] if ids else None,
                },
            )
        body: dict[str, Any] = {"object": "list", "data": entries}
        if self.flavor == "llamacpp":  # llama.cpp answers in Ollama's shape too
            body = {
                "models": [{"name": entry["id"], "model": entry["id"], "type": "model"} for entry in entries],
                **body,
            }
        return self._json(200, body)

    def _listed(self) -> list[ServedModel]:
        if self.flavor == "llamacpp" and not self.llama_router:
            return self.models[:1]  # a single-model server lists the one model it loaded
        return self.models

    def _entry(self, model: ServedModel) -> dict[str, Any]:
        builders = {
            "openrouter": self._openrouter_entry,
            "vllm": self._vllm_entry,
            "llamacpp": self._llama_entry,
            "anthropic": self._anthropic_entry,
        }
        if self.flavor in builders:
            return builders[self.flavor](model)
        owner = {"lmstudio": "organization_owner", "ollama": "library"}.get(self.flavor, "system")
        return {"id": model.id, "object": "model", "created": _CREATED, "owned_by": owner}

    def _single(self, name: str) -> web.Response:
        model = self._served(name)
        if model is None:
            if self.flavor == "anthropic":
                return self._json(
                    404, {"type": "error", "error": {"type": "not_found_error", "message": f"model: {name}"}}
                )
            return self._json(
                404,
                {
                    "error": {
                        "message": f"The model '{name}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
            )
        if self.flavor == "lmstudio":
            return self._json(200, {**self._lm_studio_entry(model), **model.fields})
        return self._json(200, {**self._entry(model), **model.fields})

    @staticmethod
    def _openrouter_entry(model: ServedModel) -> dict[str, Any]:
        return {
            "id": model.id,
            "canonical_slug": model.id,
            "hugging_face_id": "",
            "name": model.id,
            "created": _CREATED,
            "description": "",
            "context_length": model.trained,
            "architecture": {
                "modality": "text->text",
                "input_modalities": ["text"],
                "output_modalities": ["text"],
                "tokenizer": "Other",
                "instruct_type": None,
            },
            "pricing": {"prompt": "0.0000001", "completion": "0.0000004", "request": "0", "image": "0"},
            "top_provider": {
                "context_length": model.loaded or model.trained,
                "max_completion_tokens": 16_384,
                "is_moderated": False,
            },
            "per_request_limits": None,
            "supported_parameters": ["max_tokens", "temperature", "tools"],
        }

    @staticmethod
    def _vllm_entry(model: ServedModel) -> dict[str, Any]:
        return {
            "id": model.id,
            "object": "model",
            "created": _CREATED,
            "owned_by": "vllm",
            "root": model.id,
            "parent": None,
            "max_model_len": model.loaded or model.trained,
            "permission": [
                {
                    "id": "modelperm-0",
                    "object": "model_permission",
                    "created": _CREATED,
                    "allow_create_engine": False,
                    "allow_sampling": True,
                    "allow_logprobs": True,
                    "allow_search_indices": False,
                    "allow_view": True,
                    "allow_fine_tuning": False,
                    "organization": "*",
                    "group": None,
                    "is_blocking": False,
                }
            ],
        }

    def _llama_entry(self, model: ServedModel) -> dict[str, Any]:
        loaded = model.loaded is not None
        meta: dict[str, Any] | None = {
            "vocab_type": 2,
            "n_vocab": 128_256,
            "n_ctx_train": model.trained,
            "n_embd": 4096,
            "n_params": 8_030_261_312,
            "size": 4_912_898_304,
        }
        if loaded and self.meta_n_ctx:
            meta = {**(meta or {}), "n_ctx": model.loaded}
        if self.llama_router and not loaded:
            meta = None  # the router knows nothing of a model it has not started
        entry: dict[str, Any] = {
            "id": model.id,
            "aliases": list(model.aliases),
            "tags": [],
            "object": "model",
            "created": _CREATED,
            "owned_by": "llamacpp",
            "meta": meta,
        }
        if self.llama_router:
            entry["status"] = {"value": "loaded" if loaded else "unloaded", "args": ["llama-server", "-c", "0"]}
        return entry

    @staticmethod
    def _anthropic_entry(model: ServedModel) -> dict[str, Any]:
        return {
            "type": "model",
            "id": model.id,
            "display_name": model.id.replace("-", " ").title(),
            "created_at": "2025-09-29T00:00:00Z",
            "max_input_tokens": model.trained,
            "max_tokens": 64_000,
        }

    # -- llama.cpp ----------------------------------------------------------------------------

    async def _props(self, request: web.Request) -> web.Response:
        model = self.models[0] if self.models else None
        if self.llama_router:
            name = request.query.get("model")
            if not name:
                return self._json(
                    400,
                    {
                        "error": {
                            "code": 400,
                            "message": "model name is missing from the request",
                            "type": "invalid_request_error",
                        }
                    },
                )
            model = self._served(name)
        if model is None or model.loaded is None:
            return self._json(
                400, {"error": {"code": 400, "message": "model is not loaded", "type": "unavailable_error"}}
            )
        settings = {
            "id": 0,
            "id_task": -1,
            "n_ctx": model.loaded // self.slots,
            "speculative": False,
            "is_processing": False,
            "params": {"n_predict": -1, "temperature": 0.8, "top_k": 40},
        }
        return self._json(
            200,
            {
                "default_generation_settings": settings,
                "total_slots": self.slots,
                "model_path": f"/models/{model.id}",
                "chat_template": "...",
                "modalities": {"vision": False},
                "build_info": "b6000-0000000",
                "is_sleeping": False,
            },
        )

    # -- LM Studio ----------------------------------------------------------------------------

    async def _lm_studio_list(self, request: web.Request) -> web.Response:
        entries = [{**self._lm_studio_entry(model), **model.fields} for model in self.models]
        return self._json(200, {"object": "list", "data": entries})

    @staticmethod
    def _lm_studio_entry(model: ServedModel) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "id": model.id,
            "object": "model",
            "type": "llm",
            "publisher": "lmstudio-community",
            "arch": "qwen2",
            "compatibility_type": "gguf",
            "quantization": "Q4_K_M",
            "state": "loaded" if model.loaded is not None else "not-loaded",
            "max_context_length": model.trained,
        }
        if model.loaded is not None:
            entry["loaded_context_length"] = model.loaded
        return entry

    # -- Ollama -------------------------------------------------------------------------------

    def _ollama_model(self, name: str) -> ServedModel | None:
        full = name if ":" in name.rsplit("/", 1)[-1] else name + ":latest"
        return self._served(full)

    async def _ollama_ps(self, request: web.Request) -> web.Response:
        running = [
            {
                "name": model.id,
                "model": model.id,
                "size": 6_654_289_920,
                "digest": "a" * 64,
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "qwen2",
                    "families": ["qwen2"],
                    "parameter_size": "7.6B",
                    "quantization_level": "Q4_K_M",
                },
                "expires_at": "2026-01-01T00:05:00Z",
                "size_vram": 6_654_289_920,
                "context_length": model.loaded,
                **model.fields,
            }
            for model in self.models
            if model.loaded is not None
        ]
        return self._json(200, {"models": running})

    async def _ollama_show(self, request: web.Request) -> web.Response:
        asked = await request.json()
        model = self._ollama_model(str(asked.get("model") or asked.get("name") or ""))
        if model is None:
            return self._json(404, {"error": f"model '{asked.get('model')}' not found"})
        parameters = [f"{'num_ctx':<30} {model.num_ctx}"] if model.num_ctx is not None else []
        parameters.append(f'{"stop":<30} "<|im_end|>"')
        shown: dict[str, Any] = {
            "license": "",
            "modelfile": f"FROM {model.id}\n",
            "parameters": "\n".join(parameters),
            "template": "{{ .Prompt }}",
            "details": {
                "parent_model": "",
                "format": "gguf",
                "family": "qwen2",
                "families": ["qwen2"],
                "parameter_size": "7.6B",
                "quantization_level": "Q4_K_M",
            },
            "model_info": {
                "general.architecture": "qwen2",
                "general.parameter_count": 7_615_616_512,
                "qwen2.context_length": model.trained,
                "qwen2.embedding_length": 3584,
            },
            "capabilities": ["completion", "tools"],
            "modified_at": "2025-06-01T00:00:00Z",
        }
        if model.remote:
            shown.update({"remote_model": model.id.split(":")[0], "remote_host": "https://ollama.com:443"})
        return self._json(200, shown)

    async def _ollama_version(self, request: web.Request) -> web.Response:
        return self._json(200, {"version": self.ollama_version})


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then let go): connecting to it is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
