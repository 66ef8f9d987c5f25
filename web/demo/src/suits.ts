// Card symbols drawn as inline SVG, so every face renders the same on any browser and font set
// (the alchemical characters once used for the suits are missing from common fonts). Built with
// createElementNS from the constant shapes below; nothing from a tool call goes into them.

import type { Suit } from './deck';

const SVG_NS = 'http://www.w3.org/2000/svg';

type Shape = [tag: 'path' | 'circle', attrs: Record<string, string>];

// 48×48 drawings, stroked in the card's ink colour.
const SHAPES: Record<Suit | 'major', Shape[]> = {
  // A staff with a knob and three sprouting leaves.
  wands: [
    ['path', { d: 'M24 9V44' }],
    ['circle', { cx: '24', cy: '6.5', r: '2.5' }],
    ['path', { d: 'M24 17c3-4 7-4 9-2c-2 3-6 4-9 2z', class: 'fill' }],
    ['path', { d: 'M24 26c-3-4-7-4-9-2c2 3 6 4 9 2z', class: 'fill' }],
    ['path', { d: 'M24 35c3-4 7-4 9-2c-2 3-6 4-9 2z', class: 'fill' }],
  ],
  // A chalice: bowl, stem, foot.
  cups: [
    ['path', { d: 'M12 8H36C36 19 31 27 24 27C17 27 12 19 12 8Z' }],
    ['path', { d: 'M13.5 14H34.5' }],
    ['path', { d: 'M24 27V37' }],
    ['path', { d: 'M15 42C17 37.5 31 37.5 33 42Z', class: 'fill' }],
  ],
  // A sword, point up: blade, guard, grip, pommel.
  swords: [
    ['path', { d: 'M24 3L27.5 9V31H20.5V9Z' }],
    ['path', { d: 'M24 9V31' }],
    ['path', { d: 'M13 31H35' }],
    ['path', { d: 'M24 31V40' }],
    ['circle', { cx: '24', cy: '42.5', r: '2.5', class: 'fill' }],
  ],
  // A coin with a five-pointed star.
  pentacles: [
    ['circle', { cx: '24', cy: '24', r: '19' }],
    ['path', { d: 'M24 9L32.82 36.14L9.73 19.36H38.27L15.18 36.14Z' }],
  ],
  // The major arcana: an eight-pointed star.
  major: [
    ['path', { d: 'M24 3L28 20L45 24L28 28L24 45L20 28L3 24L20 20Z', class: 'fill' }],
    ['path', { d: 'M11 11L24 20L37 11L28 24L37 37L24 28L11 37L20 24Z' }],
  ],
};

const LABEL: Record<Suit | 'major', string> = {
  wands: 'wand',
  cups: 'cup',
  swords: 'sword',
  pentacles: 'pentacle',
  major: 'star',
};

/** The symbol of a suit (or of the major arcana) as a decorative SVG element. */
export function suitSymbol(suit: Suit | undefined): SVGSVGElement {
  const key = suit ?? 'major';
  const svg = document.createElementNS(SVG_NS, 'svg');
  svg.setAttribute('viewBox', '0 0 48 48');
  svg.setAttribute('width', '48');
  svg.setAttribute('height', '48');
  svg.setAttribute('class', 'card-symbol');
  svg.setAttribute('data-suit', key);
  svg.setAttribute('data-symbol', LABEL[key]);
  // The card's own label names it; the drawing adds nothing for a screen reader.
  svg.setAttribute('aria-hidden', 'true');
  svg.setAttribute('focusable', 'false');
  for (const [tag, attrs] of SHAPES[key]) {
    const el = document.createElementNS(SVG_NS, tag);
    for (const [name, value] of Object.entries(attrs)) el.setAttribute(name, value);
    svg.append(el);
  }
  return svg;
}
