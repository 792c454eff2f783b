import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def test_the_extras_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
    assert len(blocks) == 4
    for block in blocks[1:]:
        exec(compile(block, str(README), "exec"), {})
