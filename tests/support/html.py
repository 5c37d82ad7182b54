"""A strict HTML tree parser for assertions on pages (the report, the workflows page).

Every element must be closed where the HTML says: a page that a browser would silently
repair fails here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

#: A name no page may break on: markup, quotes, a control, a C1 control, a lone surrogate.
HOSTILE = '<script>alert("x")</script>\'&\x07\x9b ü \udcff'
#: What a reader sees for HOSTILE: control characters shown, the lone surrogate replaced.
HOSTILE_SHOWN = '<script>alert("x")</script>\'&\u2407\ufffd ü \ufffd'

_VOID = {"meta", "link", "br", "img", "input", "hr", "area", "base", "col", "source", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str | None]
    children: list[Node | str] = field(default_factory=list)

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def own_text(self) -> str:
        """Text directly inside, without child elements (an SVG label's <title>)."""
        return "".join(c for c in self.children if isinstance(c, str))

    def all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        found = []
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            if (tag is None or node.tag == tag) and all(
                node.attrs.get(k.rstrip("_")) == v for k, v in attrs.items()
            ):
                found.append(node)
            stack.extend(c for c in reversed(node.children) if isinstance(c, Node))
        return found

    def one(self, tag: str | None = None, **attrs: str) -> Node:
        (node,) = self.all(tag, **attrs)
        return node


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {})
        self.stack = [self.root]

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        node = Node(tag, dict(attrs))
        self.stack[-1].children.append(node)
        if tag not in _VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.stack[-1].children.append(Node(tag, dict(attrs)))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        self.stack[-1].children.append(data)


def parse(page: str) -> Node:
    builder = _TreeBuilder()
    builder.feed(page)
    builder.close()
    assert builder.stack == [builder.root], "unclosed elements"
    return builder.root
