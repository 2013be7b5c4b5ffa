"Unit checks of sgatlin_nb.data moved from nbs/05_data.ipynb (issue 71): where corpora are found, the readers' and loaders' errors on bad input, and the token writer's refusals. The page keeps the checks of what it shows."
import gzip
import json
import os
from unittest import mock

import numpy as np
import pytest
import fastcore.test as fc  # test_eq and test_fail as the page used them (imported by module: pytest would collect test_* names)
from tokenizers import Tokenizer, models

from sgatlin_nb.data import (DATA_DIR_ENV, EOT, GPT2_HUB, TOKENIZERS, Corpus, TokenFile, data_root, eot_id, load_tokenizer,
                             read_texts, resolve_corpus, special_file, tokenize_corpus)


@pytest.fixture(scope="module")
def root():
    "The data folder the page reads (the repository's samples unless SGATLIN_DATA_DIR names another)."
    r = data_root()
    assert r is not None and (r / 'README.md').exists(), f'the data folder {r} is missing its samples'
    return r


@pytest.fixture(scope="module")
def gpt2():
    return load_tokenizer('gpt2')


@pytest.mark.parametrize("name, local", [('tinystories-valid', 'tinystories/valid_head_1000.txt'),
                                         ('tinystories/train_head_2316.txt', 'tinystories/train_head_2316.txt')])
def test_a_name_under_the_data_folder_resolves_to_its_file(root, name, local):
    "An alias or a relative name finds its file in the data folder."
    fc.test_eq(resolve_corpus(name).path, root / local)


def test_an_existing_path_resolves_to_itself(root):
    "A path that exists is the corpus, whatever the data folder holds."
    fc.test_eq(resolve_corpus(root / 'webtext/wiki.valid.raw').path, root / 'webtext/wiki.valid.raw')


def test_slimpajama_is_streamed_from_the_hub():
    "The SlimPajama alias is its hub split, streamed."
    fc.test_eq(resolve_corpus('slimpajama-train'), Corpus('slimpajama-train', hub='cerebras/SlimPajama-627B', split='train', streaming=True))


def test_a_hub_id_names_its_split():
    "owner/name:split is that split of a hub dataset."
    fc.test_eq(resolve_corpus('roneneldan/TinyStories:validation').source, 'hf:roneneldan/TinyStories:validation')


def test_a_hub_dataset_other_than_slimpajama_is_downloaded():
    "Hub datasets other than SlimPajama are downloaded, not streamed."
    fc.test_eq(resolve_corpus('roneneldan/TinyStories').streaming, False)


def test_a_device_is_refused_unread():
    "/dev/null is refused by its type, before anything is read."
    fc.test_fail(lambda: resolve_corpus('/dev/null'), contains='corpus /dev/null is a device, not a file')  # refused by type, unread


def test_an_ordinary_file_is_not_special(root):
    "special_file says None for a plain file."
    fc.test_eq(special_file(root / 'README.md'), None)


def test_without_a_data_folder_an_alias_goes_to_the_hub():
    "With SGATLIN_DATA_DIR empty, an alias is its hub split."
    with mock.patch.dict(os.environ, {DATA_DIR_ENV: ''}):
        fc.test_eq(resolve_corpus('tinystories-train').source, 'hf:roneneldan/TinyStories:train')


def test_without_a_data_folder_a_file_name_fails_saying_so():
    "With SGATLIN_DATA_DIR empty, a file name under the data folder fails, saying the folder is off."
    with mock.patch.dict(os.environ, {DATA_DIR_ENV: ''}):
        fc.test_fail(lambda: resolve_corpus('tinystories/train_head_2316.txt'), contains='$SGATLIN_DATA_DIR is empty')


@pytest.mark.parametrize("says", ['{root}/stories/missing.txt', 'set SGATLIN_DATA_DIR'])
def test_a_missing_corpus_says_where_it_looked_and_what_to_set(root, says):
    "A missing file's error names the path it tried and the variable that fixes it."
    fc.test_fail(lambda: resolve_corpus('stories/missing.txt'), contains=says.format(root=root))


# read_texts on bad input: each error names the file and where in it (the page's "Bad input" list)
def _gz_bad_utf8(path):
    with gzip.open(path, 'wb') as f: f.write(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')

BAD_FILES = {  # name: (how to write it, what the error must say after the file's path, or anywhere with a leading '*')
    'latin1.txt': (lambda p: p.write_bytes(b'Once\nupon \xff time'), ' is not UTF-8: byte 0xff at byte offset 10'),
    'bad.jsonl.gz': (_gz_bad_utf8, '*byte 0xe9 at byte offset 28 of the decompressed stream'),
    'empty.txt': (lambda p: p.write_text(f'\n{EOT}\n  \n{EOT}\n'), '*holds no documents'),
    'list.json': (lambda p: p.write_text('["a", "b"]'), '*{"texts": [...]}'),
    'number.jsonl': (lambda p: p.write_text('{"text": 5}'), " line 1: the 'text' field must be a string, got int"),
    'cut.jsonl': (lambda p: p.write_text('{"text": "ok"}\n{"text": "o'), ' line 2 is not JSON'),
    'array.jsonl': (lambda p: p.write_text('["a"]'), ' line 1 is not a JSON object'),
    'numbers.json': (lambda p: p.write_text('{"texts": ["a", 5]}'), ': "texts" must hold strings, item 1 is int'),
    'tokens.bin': (lambda p: p.write_bytes(np.arange(1, 1000, dtype=np.uint16).tobytes()),
                   '*is binary, not text (a NUL byte at byte offset 1)'),
    'one_line.txt': (lambda p: p.write_text('word ' * (2 << 20)), '*line 1 is longer than 8 MiB'),  # 10 MiB without a newline
}


@pytest.mark.parametrize("name", list(BAD_FILES))
def test_a_bad_file_fails_naming_what_is_wrong(tmp_path, name):
    "Reading a malformed corpus file fails with a message naming the file and the fault."
    write, says = BAD_FILES[name]
    write(tmp_path / name)
    fc.test_fail(lambda: list(read_texts(tmp_path / name)),
              contains=says[1:] if says.startswith('*') else f'{tmp_path / name}{says}')


def test_a_missing_text_field_fails():
    "A text_field the rows lack is refused, naming it."
    fc.test_fail(lambda: list(read_texts('webtext-train', text_field='body')), contains="has no 'body' field")


def test_a_nonpositive_max_docs_fails():
    "max_docs=0 is refused at the call."
    fc.test_fail(lambda: read_texts('tinystories-valid', max_docs=0), contains='max_docs must be a positive integer')


def test_gpt2_without_a_local_copy_comes_from_the_hub(root, tmp_path):
    "An empty data folder sends 'gpt2' to hf_hub_download for the hub's tokenizer.json."
    calls = []
    def fake_hf_hub_download(repo_id, filename):
        calls.append((repo_id, filename))
        return str(root / TOKENIZERS['gpt2'])
    with mock.patch('huggingface_hub.hf_hub_download', fake_hf_hub_download):
        fc.test_eq(load_tokenizer('gpt2', data_dir=tmp_path).encode('Hello world').ids, [15496, 995])
    fc.test_eq(calls[-1], (GPT2_HUB, 'tokenizer.json'))


def test_the_authors_tokenizer_outside_the_data_folder_says_where_it_must_be(tmp_path):
    "'sgatlin' with a data folder that lacks it names the variable and the folder to set."
    fc.test_fail(lambda: load_tokenizer('sgatlin', data_dir=tmp_path), contains='set to the folder holding')


def test_a_tokenizer_without_end_of_text_has_no_eot_id():
    "eot_id of a tokenizer lacking <|endoftext|> fails, naming the token."
    fc.test_fail(lambda: eot_id(Tokenizer(models.BPE())), contains='has no <|endoftext|> token')


def test_a_file_that_is_no_tokenizer_is_refused(tmp_path):
    "A JSON file that is not a tokenizer fails in one line."
    (tmp_path / 'not_a_tokenizer.json').write_text('{"texts": ["a"]}')
    fc.test_fail(lambda: load_tokenizer(tmp_path / 'not_a_tokenizer.json'), contains='is not a tokenizer')


def test_gpt2_with_the_hub_offline_says_where_a_local_copy_goes(tmp_path):
    "An unreachable hub makes 'gpt2' fail, naming the folder a local copy must be in."
    def offline(repo_id, filename): raise OSError('offline mode is enabled')
    with mock.patch('huggingface_hub.hf_hub_download', offline):
        fc.test_fail(lambda: load_tokenizer('gpt2', data_dir=tmp_path), contains='set SGATLIN_DATA_DIR to a folder that holds gpt2_tokenizer')


@pytest.mark.parametrize("kwargs, says", [
    (dict(source='webtext-train', split='test'), "split must be one of ('all', 'train', 'heldout')"),
    (dict(source='webtext-train', split='train', heldout_fraction=0), 'heldout_fraction must be in (0, 1)'),
    (dict(source='webtext/c4-sample.01.json.gz', split='heldout', heldout_fraction=1e-6, progress=False), 'raise heldout_fraction'),
])
def test_tokenize_corpus_refuses_bad_splits(gpt2, tmp_path, kwargs, says):
    "An unknown split, a held-out fraction outside (0, 1) and a split left empty are refused."
    fc.test_fail(lambda: tokenize_corpus(tokenizer=gpt2, path=tmp_path / 'x.bin', **kwargs), contains=says)


def test_a_token_file_that_was_never_written_says_how_to_make_it(tmp_path):
    "TokenFile on a path without file and sidecar points to tokenize_corpus."
    fc.test_fail(lambda: TokenFile(tmp_path / 'x.bin'), contains='write one with tokenize_corpus')
