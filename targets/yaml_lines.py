"""Map a pydantic error location (a key path) to the line of the YAML file it came from."""
from __future__ import annotations

import yaml


def locate(text: str, loc: tuple) -> int:
    """1-based line of the deepest node of `loc` found in `text`; 1 if none is found."""
    try:
        node = yaml.compose(text)
    except yaml.YAMLError:
        return 1
    line = node.start_mark.line + 1 if node is not None else 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((v for k, v in node.value if k.value == str(part)), None)
            key = next((k for k, v in node.value if k.value == str(part)), None)
            if match is None:
                break
            line, node = key.start_mark.line + 1, match
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line
