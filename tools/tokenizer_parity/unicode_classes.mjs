// Prints, as JSON, the code point ranges of the Unicode general categories L, M, N, P, S in this
// Node.js (its ICU tables), plus the Unicode version: the parity test compares them with PCRE2's
// tables and keeps code points the two disagree on out of its random strings.
//   node unicode_classes.mjs > classes.json
const out = { unicode: process.versions.unicode, classes: {} };
for (const cat of ["L", "M", "N", "P", "S"]) {
  const re = new RegExp(`^\\p{${cat}}$`, "u");
  const ranges = [];
  let start = -1;
  for (let cp = 0; cp <= 0x110000; cp++) {
    const inCat = cp < 0x110000 && !(cp >= 0xd800 && cp <= 0xdfff) && re.test(String.fromCodePoint(cp));
    if (inCat && start < 0) start = cp;
    if (!inCat && start >= 0) {
      ranges.push([start, cp - 1]);
      start = -1;
    }
  }
  out.classes[cat] = ranges;
}
process.stdout.write(JSON.stringify(out));
