"""Reading what an item holds: a document's text (PDFs made here with pypdf, text files in the encodings
people really send) and an image's size, scaled and re-encoded with Pillow. Every bad input has a clear outcome."""

from __future__ import annotations

import codecs
import io
import zipfile

import pytest
from PIL import Image

from gateway.media.errors import MediaError
from gateway.media.extract import document_kind, extract_document, read_document
from gateway.media.images import prepare_image, prepare_image_now
from tests.fakes.media import pdf

RUSSIAN = (
    "Счёт номер 0425 за апрель. Оплатить до пятницы, сумма сорок два евро. "
    "Просьба не задерживать оплату, иначе доставка будет отложена на следующую неделю."
)


# --------------------------------------------------------------------------- PDFs, made here


def test_a_pdfs_text_comes_page_by_page_with_its_page_count() -> None:
    got = extract_document(pdf("Invoice 0425", "Total 42 EUR"), name="invoice-0425.pdf", mime="application/pdf")
    assert (got.pages, got.problem) == (2, "")
    assert got.text == "[page 1]\nInvoice 0425\n\n[page 2]\nTotal 42 EUR"
    single = extract_document(pdf("Just one page"), name="a.pdf", mime="application/pdf")
    assert (single.text, single.pages) == ("Just one page", 1)


def test_a_scanned_pdf_says_it_has_no_text_layer() -> None:
    got = extract_document(pdf("", ""), name="scan.pdf", mime="application/pdf")
    assert (got.text, got.pages) == ("", 2)
    assert got.problem.startswith("no text layer")


def test_a_password_protected_pdf_is_named_so() -> None:
    got = extract_document(pdf("secret plans", user_password="hunter2"), name="p.pdf", mime="application/pdf")
    assert (got.text, got.problem) == ("", "the PDF is password-protected")


def test_a_pdf_locked_only_against_copying_is_read() -> None:
    got = extract_document(pdf("open to read", user_password="", owner_password="owner"), name="p.pdf", mime="")
    assert (got.text, got.problem) == ("open to read", "")


@pytest.mark.parametrize("data", [b"%PDF-1.7\n" + b"\x00garbage" * 50, pdf("Invoice 0425")[:200], b"%PDF-"])
def test_a_corrupt_pdf_is_named_so(data: bytes) -> None:
    got = extract_document(data, name="broken.pdf", mime="application/pdf")
    assert got.text == "" and got.problem.startswith("corrupt PDF (")


# --------------------------------------------------------------------------- text files


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (RUSSIAN.encode("utf-8"), "utf_8"),
        (codecs.BOM_UTF8 + RUSSIAN.encode("utf-8"), "utf_8"),
        (RUSSIAN.encode("utf-16"), "utf_16"),  # with its BOM, as Windows Notepad writes it
        (RUSSIAN.encode("cp1251"), "cp1251"),
    ],
)
def test_text_files_decode_in_the_encoding_they_came_in(data: bytes, encoding: str) -> None:
    got = extract_document(data, name="notes.txt", mime="text/plain")
    assert (got.text, got.encoding, got.problem) == (RUSSIAN, encoding, "")


def test_code_and_logs_are_text_by_their_name_whatever_the_mime() -> None:
    source = "def main() -> None:\n    print('hi')\n"
    assert extract_document(source.encode(), name="tool.py", mime="application/octet-stream").text == source
    assert document_kind(b"x", name="app.LOG", mime="") == "text"
    assert document_kind(b'{"a": 1}', name="data", mime="application/json") == "text"


def test_an_unlabelled_file_is_text_only_when_it_reads_as_text() -> None:
    assert document_kind(b"plain words in a file with no name", name="", mime="") == "text"
    assert document_kind(RUSSIAN.encode("utf-16"), name="README", mime="application/octet-stream") == "text"
    assert document_kind(bytes(range(256)) * 4, name="blob", mime="application/octet-stream") == "binary"


def test_a_binary_type_says_it_cannot_be_read() -> None:
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as packed:
        packed.writestr("a.txt", "inside")
    got = extract_document(archive.getvalue(), name="files.zip", mime="application/zip")
    assert got.text == "" and got.problem.startswith("cannot read this type (application/zip)")
    unnamed = extract_document(b"\x00\x01\x02" * 100, name="thing.docx", mime="")
    assert unnamed.problem.startswith("cannot read this type (.docx)")


async def test_documents_are_read_off_the_event_loop() -> None:
    got = await read_document(pdf("Async page"), name="a.pdf", mime="application/pdf")
    assert got.text == "Async page"


# --------------------------------------------------------------------------- images


def image_bytes(size: tuple[int, int], fmt: str, mode: str = "RGB", **options: object) -> bytes:
    out = io.BytesIO()
    Image.new(mode, size, (200, 30, 30) if mode == "RGB" else None).save(out, fmt, **options)
    return out.getvalue()


def opened(data: bytes) -> Image.Image:
    image = Image.open(io.BytesIO(data))
    image.load()
    return image


def test_a_small_image_in_a_format_providers_take_is_kept_byte_for_byte() -> None:
    for fmt, mime in (("PNG", "image/png"), ("JPEG", "image/jpeg"), ("WEBP", "image/webp"), ("GIF", "image/gif")):
        data = image_bytes((640, 480), fmt)
        picture = prepare_image_now(data, 2048)
        assert (picture.data, picture.mime, picture.width, picture.height) == (data, mime, 640, 480)


async def test_a_large_photo_is_scaled_to_the_long_side_keeping_its_aspect_and_format() -> None:
    picture = await prepare_image(image_bytes((4000, 3000), "JPEG"), max_side=2048)
    assert (picture.mime, picture.width, picture.height) == ("image/jpeg", 2048, 1536)
    assert opened(picture.data).size == (2048, 1536)
    tall = await prepare_image(image_bytes((1000, 5000), "PNG"), max_side=1000)
    assert (tall.mime, tall.width, tall.height) == ("image/png", 200, 1000)


def test_a_phone_photo_is_turned_upright_by_its_exif_orientation() -> None:
    exif = Image.Exif()
    exif[0x0112] = 6  # rotated 90 degrees: stored landscape, shown portrait
    picture = prepare_image_now(image_bytes((800, 600), "JPEG", exif=exif.tobytes()), 2048)
    assert (picture.width, picture.height) == (600, 800)
    assert opened(picture.data).getexif().get(0x0112, 1) == 1


def test_other_formats_become_jpeg_or_png_by_transparency() -> None:
    bmp = prepare_image_now(image_bytes((300, 200), "BMP"), 2048)
    assert (bmp.mime, opened(bmp.data).format, bmp.width) == ("image/jpeg", "JPEG", 300)
    tiff = prepare_image_now(image_bytes((300, 200), "TIFF", mode="RGBA"), 2048)
    assert (tiff.mime, opened(tiff.data).mode) == ("image/png", "RGBA")


def test_an_animated_gif_is_sent_as_its_first_frame() -> None:
    frames = [Image.new("RGB", (120, 80), color) for color in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    picture = prepare_image_now(out.getvalue(), 2048)
    assert (picture.mime, picture.width, picture.height) == ("image/png", 120, 80)
    assert opened(picture.data).convert("RGB").getpixel((5, 5)) == (255, 0, 0)


@pytest.mark.parametrize("data", [b"not an image at all", image_bytes((640, 480), "PNG")[:300], b""])
def test_what_is_not_a_readable_image_is_refused_as_corrupt(data: bytes) -> None:
    with pytest.raises(MediaError, match=r"^corrupt image: "):
        prepare_image_now(data, 2048)
