"""riftco.text: byte and byte-level BPE tokenizers, special tokens, chat templates.

Pure Python, standard library only. See the package README for the interface,
the saved-state format and the Hugging Face export.
"""

from riftco.text.base import FORMAT, FORMAT_VERSION, MAX_VOCAB_SIZE, Tokenizer
from riftco.text.bpe import BpeTokenizer
from riftco.text.byte import ByteTokenizer
from riftco.text.chat import (
    DEFAULT_CHAT_TEMPLATE,
    ChatEncoding,
    ChatTemplate,
    RoleFormat,
    ToolCallSyntax,
)
from riftco.text.errors import (
    ChatTemplateError,
    DecodeError,
    EncodeError,
    ExportError,
    SpecialTokenError,
    StateError,
    TokenizerError,
    TrainingError,
)
from riftco.text.hf import bytes_to_unicode, save_hf_tokenizer_json, to_hf_tokenizer_json
from riftco.text.pretokenize import GPT2_PATTERN
from riftco.text.special import (
    ASSISTANT,
    DEFAULT_SPECIAL_TOKENS,
    END,
    END_OF_TEXT,
    SYSTEM,
    USER,
)
from riftco.text.state import load, save, tokenizer_from_state

__version__ = "0.1.0"

__all__ = [
    "ASSISTANT",
    "DEFAULT_CHAT_TEMPLATE",
    "DEFAULT_SPECIAL_TOKENS",
    "END",
    "END_OF_TEXT",
    "FORMAT",
    "FORMAT_VERSION",
    "GPT2_PATTERN",
    "MAX_VOCAB_SIZE",
    "SYSTEM",
    "USER",
    "BpeTokenizer",
    "ByteTokenizer",
    "ChatEncoding",
    "ChatTemplate",
    "ChatTemplateError",
    "DecodeError",
    "EncodeError",
    "ExportError",
    "RoleFormat",
    "SpecialTokenError",
    "StateError",
    "Tokenizer",
    "TokenizerError",
    "ToolCallSyntax",
    "TrainingError",
    "bytes_to_unicode",
    "load",
    "save",
    "save_hf_tokenizer_json",
    "to_hf_tokenizer_json",
    "tokenizer_from_state",
]
