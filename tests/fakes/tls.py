"""Test certificates for HTTPS fakes, made with ``trustme`` (no files shipped, nothing trusted system-wide).

A :class:`TestPKI` holds:

- ``ca``: the test CA, and ``ca_file``: its certificate as a PEM bundle on disk (for
  ``SSL_CERT_FILE`` or ``verify=``), ``client_context()``: an ``ssl.SSLContext`` trusting it;
- ``server_context``: a server context whose certificate (by that CA) names ``localhost``
  and ``127.0.0.1`` — hand it to ``FakeLLMServer(ssl=…, server_name="localhost")``;
- ``untrusted_context``: a server certificate for the same names from a second, unrelated
  CA (``other_ca``), to see a client refuse an untrusted chain;
- ``wrong_host_context``: a certificate from the trusted CA for another host name only
  (:data:`OTHER_HOST`), to see a client refuse a name mismatch.

``make_pki(directory)`` builds one; the pytest fixtures live with the tests that use them
(``tests/test_fakes.py``), session-scoped because key generation is the slow part.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path

import trustme

#: The names the server certificate is valid for.
SERVER_NAMES = ("localhost", "127.0.0.1")
#: The only name on :attr:`TestPKI.wrong_host_context`'s certificate.
OTHER_HOST = "other-provider.test"


def server_context(ca: trustme.CA, *names: str) -> ssl.SSLContext:
    """A TLS server context presenting a certificate from ``ca`` for ``names``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(context)
    return context


@dataclass
class TestPKI:
    """See the module docstring."""

    __test__ = False  # not a pytest test class, despite the name

    ca: trustme.CA
    other_ca: trustme.CA
    ca_file: Path
    server_context: ssl.SSLContext
    untrusted_context: ssl.SSLContext
    wrong_host_context: ssl.SSLContext

    def client_context(self) -> ssl.SSLContext:
        """A client context that trusts the test CA (and nothing else)."""
        context = ssl.create_default_context()
        self.ca.configure_trust(context)
        return context


def make_pki(directory: Path) -> TestPKI:
    """A fresh test CA, a second unrelated CA, their server contexts, and the CA bundle written under ``directory``."""
    ca, other_ca = trustme.CA(), trustme.CA()
    ca_file = Path(directory) / "test-ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return TestPKI(
        ca=ca,
        other_ca=other_ca,
        ca_file=ca_file,
        server_context=server_context(ca, *SERVER_NAMES),
        untrusted_context=server_context(other_ca, *SERVER_NAMES),
        wrong_host_context=server_context(ca, OTHER_HOST),
    )
