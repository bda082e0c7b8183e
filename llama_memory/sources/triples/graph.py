"""A user's knowledge triples as a graph: networkx export and a matplotlib picture
(``plot`` needs the ``graph`` extra and draws off-screen, outside pyplot's global state).
Usually reached through the source: ``triples.to_networkx(scope)``, ``triples.plot(path,
scope)``.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union

from ...core.distribution import install_hint
from .model import KnowledgeTriple
from .normalize import display_predicate, normalize_entity

if TYPE_CHECKING:  # pragma: no cover
    import networkx

_CURVE = "arc3,rad=0.08"
_FONT_SIZE = 9
_WRAP = 14  # characters per line of a node's label


def _wrap(label: str) -> str:
    return "\n".join(textwrap.wrap(label, _WRAP)) or label


def _node_size(label: str) -> float:
    """Marker area (points squared) of a circle that holds the wrapped label."""
    lines = label.split("\n")
    width = 0.62 * _FONT_SIZE * max(len(line) for line in lines)  # average glyph width
    height = 1.3 * _FONT_SIZE * len(lines)
    return max(40.0, width + 14, height + 14) ** 2


def to_networkx(triples: Iterable[KnowledgeTriple], *, name: Optional[str] = None) -> "networkx.MultiDiGraph":
    """A directed multigraph of the triples: nodes are normalised entity names (``label``:
    the text as first seen), each triple an edge ``subject -> object`` keyed by its id,
    with ``predicate``, ``label``, ``valid_from``, ``valid_to`` and ``current``.

    Args:
        triples: e.g. ``source.triples(scope)`` (current facts only).
        name: the graph's name (the user id, typically).
    """
    import networkx as nx

    graph = nx.MultiDiGraph(name=name or "")
    for triple in triples:
        ends = []
        for text in (triple.subject, triple.object):
            node = normalize_entity(text)
            if node not in graph:
                graph.add_node(node, label=text)
            ends.append(node)
        predicate = display_predicate(triple.predicate)
        graph.add_edge(
            ends[0], ends[1], key=triple.id or f"{ends[0]}|{predicate}|{ends[1]}", predicate=predicate, label=predicate,
            valid_from=triple.valid_from, valid_to=triple.valid_to, current=triple.current,
        )  # fmt: skip
    return graph


def plot(
    graph: Union["networkx.MultiDiGraph", Iterable[KnowledgeTriple]], path: Union[str, Path], *,
    title: Optional[str] = None, figsize: tuple[float, float] = (9.0, 7.0), dpi: int = 120,
    seed: int = 7,
) -> Path:
    """Draw a knowledge graph to an image file (format by suffix) and return its path.
    Parallel facts share one arrow listing their predicates; the layout is seeded.

    Args:
        graph: a graph from :func:`to_networkx`, or triples to build one from.
        path: where to write the picture (parent directories are created).
        title: a title; default "Knowledge graph of <the graph's name>".
        figsize: the figure's size in inches.
        dpi: its resolution.
        seed: the layout's random seed.

    Raises:
        ImportError: matplotlib is not installed (the message says how to get it).
    """
    import networkx as nx

    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise ImportError(f"plotting a knowledge graph needs matplotlib: {install_hint('graph')}") from exc

    if not isinstance(graph, nx.Graph):
        graph = to_networkx(graph)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)

    # A Figure on the Agg canvas, not pyplot: no GUI backend is needed and the
    # caller's pyplot state (current figure, interactive mode) is left alone.
    figure = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    axes.set_axis_off()
    if title is None:
        name = graph.graph.get("name")
        title = f"Knowledge graph of {name}" if name else "Knowledge graph"
    axes.set_title(title)
    if graph.number_of_nodes() == 0:
        axes.text(0.5, 0.5, "no knowledge yet", ha="center", va="center", color="grey")
    else:
        _draw(graph, axes, seed)
    figure.savefig(target)
    return target


def _draw(graph: "networkx.MultiDiGraph", axes: Any, seed: int) -> None:
    import networkx as nx

    # Parallel edges would be drawn on top of each other: merge them for drawing.
    simple = nx.DiGraph()
    simple.add_nodes_from(graph.nodes(data=True))
    for u, v, data in graph.edges(data=True):
        if simple.has_edge(u, v):
            simple[u][v]["label"] += "; " + data["label"]
        else:
            simple.add_edge(u, v, label=data["label"])
    # Spread wider than networkx's default (1/sqrt(n)): nodes hold labels, edges too.
    spread = 2.5 / max(1, simple.number_of_nodes()) ** 0.5
    # Laid out undirected: A->B plus B->A must not pull A and B twice as close.
    positions = nx.spring_layout(simple.to_undirected(as_view=True), seed=seed, k=spread)
    nodes = list(simple.nodes)
    labels = {n: _wrap(str(simple.nodes[n].get("label", n))) for n in nodes}
    sizes = [_node_size(labels[n]) for n in nodes]
    nx.draw_networkx_nodes(
        simple, positions, ax=axes, nodelist=nodes, node_size=sizes,
        node_color="#cfe3f7", edgecolors="#3b6fa0",
    )  # fmt: skip
    nx.draw_networkx_labels(simple, positions, ax=axes, labels=labels, font_size=_FONT_SIZE)
    # The same sizes again, so arrows stop at each node's border.
    nx.draw_networkx_edges(
        simple, positions, ax=axes, nodelist=nodes, node_size=sizes, arrows=True,
        arrowsize=16, edge_color="#555555", connectionstyle=_CURVE,
    )  # fmt: skip
    # Curved edges keep A->B and B->A apart; older networkx (llama-index-core asks only
    # for >= 3.0) cannot curve labels with them, so labels then sit on the chord.
    curved = "connectionstyle" in inspect.signature(nx.draw_networkx_edge_labels).parameters
    axes.margins(0.12)  # room for the outer nodes, which are drawn larger than a point
    nx.draw_networkx_edge_labels(
        simple, positions, ax=axes, edge_labels=nx.get_edge_attributes(simple, "label"),
        font_size=8, **({"connectionstyle": _CURVE} if curved else {}),
    )  # fmt: skip
