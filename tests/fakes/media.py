"""The files people send, made here (a PDF with a text layer per page, a one-colour PNG), and the images a
request to the fake provider carried."""

from __future__ import annotations

import base64
import io

from PIL import Image
from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

from tests.fakes.llm_server import RecordedRequest


def pdf(*pages: str, user_password: str | None = None, owner_password: str | None = None) -> bytes:
    """A PDF with one page per text (an empty text: a page with no text layer, as a scan has)."""
    writer = PdfWriter()
    for text in pages:
        page = writer.add_blank_page(612, 792)
        if text:
            font = DictionaryObject(
                {
                    NameObject("/Type"): NameObject("/Font"),
                    NameObject("/Subtype"): NameObject("/Type1"),
                    NameObject("/BaseFont"): NameObject("/Helvetica"),
                }
            )
            page[NameObject("/Resources")] = DictionaryObject(
                {NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})}
            )
            stream = DecodedStreamObject()
            stream.set_data(f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1"))
            page.replace_contents(stream)
    if user_password is not None:
        writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def png(width: int, height: int, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, "PNG")
    return out.getvalue()


def images_in(request: RecordedRequest) -> list[bytes]:
    """The decoded bytes of every image part the request carries."""
    found = []
    for message in request.messages:
        content = message.get("content")
        for part in content if isinstance(content, list) else ():
            if part.get("type") == "image_url":
                url = part["image_url"]["url"]
                found.append(base64.b64decode(url.split(",", 1)[1]))
    return found
