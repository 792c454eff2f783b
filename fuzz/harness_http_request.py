"""The HTTP API's request bodies: JSON decoding and both routes' parsers."""

import atheris

with atheris.instrument_imports():
    from riftco.serve import ServerConfig
    from riftco.serve.app import decode_json_body
    from riftco.serve.protocol import parse_chat, parse_completion

from common import fuzz

CONFIG = ServerConfig(model_id="fuzz")


def target(data: bytes) -> None:
    body = decode_json_body(data)
    for parse in (parse_chat, parse_completion):
        try:
            parse(body, CONFIG)
        except Exception as exc:  # only the HTTP layer's typed 4xx errors are allowed
            from riftco.serve.errors import RequestError

            if not isinstance(exc, RequestError) or not 400 <= exc.status < 500:
                raise


if __name__ == "__main__":
    fuzz(target)
