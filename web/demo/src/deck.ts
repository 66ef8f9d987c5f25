// The 78-card tarot deck, with ids like `the-fool` and `three-of-cups`.

export type Suit = 'wands' | 'cups' | 'swords' | 'pentacles';

export interface Card {
  id: string;
  name: string;
  arcana: 'major' | 'minor';
  /** Roman numeral for the major arcana, rank for the minor. */
  number: string;
  suit?: Suit;
}

const MAJOR = [
  'The Fool', 'The Magician', 'The High Priestess', 'The Empress', 'The Emperor', 'The Hierophant',
  'The Lovers', 'The Chariot', 'Strength', 'The Hermit', 'Wheel of Fortune', 'Justice',
  'The Hanged Man', 'Death', 'Temperance', 'The Devil', 'The Tower', 'The Star', 'The Moon',
  'The Sun', 'Judgement', 'The World',
];
const ROMAN = ['0', 'I', 'II', 'III', 'IV', 'V', 'VI', 'VII', 'VIII', 'IX', 'X', 'XI', 'XII', 'XIII',
  'XIV', 'XV', 'XVI', 'XVII', 'XVIII', 'XIX', 'XX', 'XXI'];
const RANKS = ['Ace', 'Two', 'Three', 'Four', 'Five', 'Six', 'Seven', 'Eight', 'Nine', 'Ten',
  'Page', 'Knight', 'Queen', 'King'];
const SUITS: Suit[] = ['wands', 'cups', 'swords', 'pentacles'];

const slug = (name: string) => name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '');
const capital = (s: string) => s[0].toUpperCase() + s.slice(1);

export const DECK: readonly Card[] = [
  ...MAJOR.map((name, i) => ({ id: slug(name), name, arcana: 'major' as const, number: ROMAN[i] })),
  ...SUITS.flatMap((suit) =>
    RANKS.map((rank) => {
      const name = `${rank} of ${capital(suit)}`;
      return { id: slug(name), name, arcana: 'minor' as const, number: rank, suit };
    }),
  ),
];

const BY_ID = new Map(DECK.map((c) => [c.id, c]));

export function cardById(id: string): Card | undefined {
  return BY_ID.get(id);
}

/** A Fisher–Yates shuffle of `cards` using the browser's CSPRNG. */
export function shuffled<T>(cards: readonly T[]): T[] {
  const out = [...cards];
  const rnd = new Uint32Array(out.length);
  crypto.getRandomValues(rnd);
  for (let i = out.length - 1; i > 0; i--) {
    const j = rnd[i] % (i + 1);
    [out[i], out[j]] = [out[j], out[i]];
  }
  return out;
}
