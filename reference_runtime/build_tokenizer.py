"""Builds the shipped `tokenizer.json`: a byte-level BPE trained on the small built-in English corpus below.

Run `python -m reference_runtime.build_tokenizer` after changing the corpus; the build is deterministic and a
test rebuilds it and compares with the shipped file.
"""
from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from .config import SPECIAL_TOKENS

TOKENIZER_PATH = Path(__file__).with_name("tokenizer.json")
# drama3-tiny has 512 text ids and the special tokens take the last 19 of them.
BPE_VOCAB_SIZE = 512 - len(SPECIAL_TOKENS)

CORPUS = """\
The lighthouse keeper climbed the narrow stairs every evening at six. She wound the clock, trimmed the wick,
and wrote a single line in the logbook: the weather, the ships she had seen, and whether the gulls were loud.
Nobody had read the logbook in forty years, but she kept writing it anyway, because the habit kept her honest.

"Are you sure this is the right road?" asked the driver, slowing down as the gravel turned to mud.
"No," said the old man in the back seat, "but it is the road I remember, and memory is all we have left."
They drove on in silence until the first houses of the village appeared between the trees.

Good morning, and welcome to the station. The next train to the coast leaves from platform four at nine
fifteen. Please keep your luggage with you at all times, and mind the gap between the train and the platform.
We apologise for the delay this morning; a fallen tree has been cleared from the line near the river.

To make bread, mix four cups of flour with a spoon of salt and a spoon of yeast. Add warm water slowly,
stirring until the dough comes together, then knead it for ten minutes on a floured table. Leave it to rise
for an hour in a warm place, shape it into a loaf, and bake it until the crust sounds hollow when you knock.

I think the problem is simpler than it looks. We have three options, and only one of them works in winter.
If we wait until spring, the price goes up; if we buy now, we have nowhere to store it. So we rent the barn,
we buy the seed in February, and we plant as soon as the ground is soft enough to take a spade.

She laughed, then stopped, then laughed again, harder this time, until the whole table was laughing with her.
"What is so funny?" he asked. "Nothing," she said, wiping her eyes. "Everything. It has been a long week."
Outside, the rain kept falling on the quiet street, and somewhere a radio was playing an old song.

Numbers and dates matter too: 1, 2, 3, 10, 42, 100, 2024, 3.14, 9:30 a.m., the 21st of June, 50% off.
Questions, exclamations and pauses change the voice: really? wow! well... okay; fine - let's go.
"""


def build_tokenizer() -> Tokenizer:
    """Train the BPE (ids 0..BPE_VOCAB_SIZE-1) and append the special tokens after it, in SPECIAL_TOKENS order."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS.splitlines(), trainer=trainer)
    tokenizer.add_special_tokens(list(SPECIAL_TOKENS))
    return tokenizer


def serialize(tokenizer: Tokenizer) -> str:
    return tokenizer.to_str(pretty=True) + "\n"


def main() -> None:
    TOKENIZER_PATH.write_text(serialize(build_tokenizer()), encoding="utf-8")
    print(f"wrote {TOKENIZER_PATH}")


if __name__ == "__main__":
    main()
