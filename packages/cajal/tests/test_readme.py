import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs():
    block = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)[0]
    exec(compile(block, str(README), "exec"), {})
