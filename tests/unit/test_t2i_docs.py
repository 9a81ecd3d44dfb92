"""docs/diffusion.md carries the t2i configuration reference generated from ``T2IConfig``, up to date."""

from pathlib import Path

from rollarc.config.docs import render
from rollarc.diffusion.config import T2IConfig

DOC = Path(__file__).resolve().parents[2] / "docs" / "diffusion.md"
START, END = "<!-- t2i-config:start -->", "<!-- t2i-config:end -->"


def reference() -> str:
    """The generated tables, from the section list on (the page's own header replaces render's)."""
    text = render(T2IConfig)
    return text[text.index("## Sections") :].replace("## ", "### ").strip()


def test_the_t2i_reference_in_the_docs_is_current():
    text = DOC.read_text()
    block = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert block == reference(), "regenerate: python -c 'from tests.unit.test_t2i_docs import write; write()'"


def write() -> None:
    text = DOC.read_text()
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    DOC.write_text(f"{head}{START}\n{reference()}\n{END}{tail}")
