// The conversation as text, from LiveKit's transcriptions: framework-free, shared by the React
// hook useTranscript() and the demo page. What livekit-client 2.x delivers, both handled:
//
// - text streams on the topic `lk.transcription` (LiveKit Agents 1.x): one stream per segment
//   (or per interim version of one), its chunks deltas of the text; the attributes
//   `lk.segment_id`, `lk.transcription_final` ("true"/"false") and `lk.transcribed_track_id`
//   (the audio track the words were heard on, so the user's words sent by the agent are told
//   apart from the agent's own);
// - `RoomEvent.TranscriptionReceived` (older agents): segments with `id`, `text` and `final`.
//   LiveKit Agents 1.x sends both, under different ids: once a text stream has arrived in a
//   room, the events are ignored there and the segments they gave are dropped.
//
// Segments are keyed by id: an interim version is replaced by the next one and by the final,
// and a final one is never downgraded. The list is bounded (the oldest segments drop out).
// livekit-client is only a type here: nothing of it is loaded by this module.

import type { Participant, Room, TextStreamReader, TrackPublication, TranscriptionSegment as LkSegment } from 'livekit-client';

export const TRANSCRIPTION_TOPIC = 'lk.transcription';

export type Speaker = 'agent' | 'user';

export interface TranscriptSegment {
  /** LiveKit's segment id (`lk.segment_id`), or the stream's id when the sender gave none. */
  id: string;
  speaker: Speaker;
  /** The identity of the participant whose words these are, when known. */
  identity: string | null;
  text: string;
  /** False while the words may still change (an interim transcription). */
  final: boolean;
  /** When the segment first arrived (ms since the epoch). */
  at: number;
  /** Where it came from: a text stream, a TranscriptionReceived event, or this tab's text chat. */
  source: TranscriptSource;
}

export type TranscriptSource = 'stream' | 'event' | 'chat';

export interface TranscriptOptions {
  /** How many segments are kept (default 200): the oldest drop out. */
  limit?: number;
  /** The longest text kept per segment, in characters (default 4000). */
  maxTextLength?: number;
}

/** The part of a livekit-client Room the transcript reads. */
export type TranscriptRoom = Pick<Room, 'registerTextStreamHandler' | 'unregisterTextStreamHandler' | 'on' | 'off' | 'localParticipant'>;

export interface SegmentUpdate {
  id: string;
  speaker: Speaker;
  identity?: string | null;
  text: string;
  final: boolean;
  source?: TranscriptSource;
}

export class TranscriptStore {
  private readonly limit: number;
  private readonly maxText: number;
  private readonly segments = new Map<string, TranscriptSegment>();
  private snapshot: readonly TranscriptSegment[] = [];
  private readonly listeners = new Set<() => void>();

  constructor(options: TranscriptOptions = {}) {
    this.limit = Math.max(1, Math.floor(options.limit ?? 200));
    this.maxText = Math.max(1, Math.floor(options.maxTextLength ?? 4000));
  }

  readonly subscribe = (listener: () => void): (() => void) => {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  };

  /** The segments, oldest first; a new array after every change (the same one otherwise). */
  readonly getSnapshot = (): readonly TranscriptSegment[] => this.snapshot;

  /**
   * Adds a segment or replaces the one with its id. A final segment is not replaced by an
   * interim version of it arriving late. Returns whether anything changed.
   */
  update(u: SegmentUpdate): boolean {
    const old = this.segments.get(u.id);
    const text = u.text.length > this.maxText ? u.text.slice(0, this.maxText) : u.text;
    if (old) {
      if (old.final && !u.final) return false;
      if (old.text === text && old.final === u.final && old.speaker === u.speaker) return false;
      this.segments.set(u.id, { ...old, speaker: u.speaker, identity: u.identity ?? old.identity, text, final: u.final, source: u.source ?? old.source });
    } else {
      const source = u.source ?? 'stream';
      this.segments.set(u.id, { id: u.id, speaker: u.speaker, identity: u.identity ?? null, text, final: u.final, at: Date.now(), source });
      while (this.segments.size > this.limit) {
        const oldest = this.segments.keys().next().value as string;
        this.segments.delete(oldest);
      }
    }
    this.changed();
    return true;
  }

  /** Removes the segments that came from `source`. */
  private drop(source: TranscriptSource): void {
    let dropped = false;
    for (const [id, seg] of this.segments) {
      if (seg.source === source) {
        this.segments.delete(id);
        dropped = true;
      }
    }
    if (dropped) this.changed();
  }

  clear(): void {
    if (this.segments.size === 0) return;
    this.segments.clear();
    this.changed();
  }

  /**
   * Follows a joined room's transcriptions until the returned function is called. Takes the
   * room's text stream handler for `lk.transcription` (livekit-client allows one per topic; if
   * another took it, only TranscriptionReceived is read).
   */
  attach(room: TranscriptRoom): () => void {
    let live = true;
    const local = () => room.localParticipant?.identity ?? null;
    const localTracks = () => {
      const sids = new Set<string>();
      for (const pub of room.localParticipant?.trackPublications?.values() ?? []) sids.add(pub.trackSid);
      return sids;
    };
    // LiveKit Agents 1.x sends each segment both ways, under different ids. Text streams win:
    // from the first one on, the events are ignored and the segments they gave are dropped.
    let streamsSeen = false;
    const onStream = (reader: TextStreamReader, from: { identity: string }) => {
      if (live && !streamsSeen) {
        streamsSeen = true;
        this.drop('event');
      }
      void this.read(reader, from.identity, local, localTracks, () => live);
    };
    const onEvent = (segments: LkSegment[], participant?: Participant, _publication?: TrackPublication) => {
      if (!live || streamsSeen) return;
      const mine = participant ? participant.isLocal || participant.identity === local() : false;
      for (const s of segments) {
        this.update({ id: s.id, speaker: mine ? 'user' : 'agent', identity: participant?.identity ?? null, text: s.text, final: s.final, source: 'event' });
      }
    };
    // livekit-client allows one handler per topic: when the app took it already, only the
    // TranscriptionReceived event is read.
    let streams = true;
    try {
      room.registerTextStreamHandler(TRANSCRIPTION_TOPIC, onStream);
    } catch {
      streams = false;
    }
    room.on('transcriptionReceived', onEvent);
    return () => {
      if (!live) return;
      live = false;
      room.off('transcriptionReceived', onEvent);
      if (!streams) return;
      try {
        room.unregisterTextStreamHandler(TRANSCRIPTION_TOPIC);
      } catch {
        // The room is gone already.
      }
    };
  }

  private async read(
    reader: TextStreamReader,
    sender: string,
    local: () => string | null,
    localTracks: () => Set<string>,
    live: () => boolean,
  ): Promise<void> {
    const attrs = reader.info.attributes ?? {};
    const id = attrs['lk.segment_id'] || reader.info.id;
    const track = attrs['lk.transcribed_track_id'];
    // The user's words: sent by this tab, or transcribed from one of this tab's tracks.
    const mine = sender === local() || (!!track && localTracks().has(track));
    const speaker: Speaker = mine ? 'user' : 'agent';
    const identity = mine ? local() : sender;
    const update = (text: string, final: boolean) => this.update({ id, speaker, identity, text, final, source: 'stream' });
    // `lk.transcription_final` may come in the header or, for words streamed as they are
    // spoken, in the trailer (livekit-client merges it into `info.attributes` at the end).
    const finalNow = () => (reader.info.attributes ?? {})['lk.transcription_final'];
    let text = '';
    try {
      for await (const chunk of reader) {
        if (!live()) return;
        text += chunk;
        if (text.length > this.maxText) text = text.slice(0, this.maxText);
        update(text, false);
      }
    } catch {
      // A stream cut short keeps what arrived; it is not marked final unless it said so.
      if (live() && finalNow() === 'true') update(text, true);
      return;
    }
    if (!live()) return;
    // A stream that never says is one whole segment: complete when it ends. So is the agent's
    // speech, streamed as spoken in one stream per segment: LiveKit Agents for Node leaves
    // `final=false` from the header in place at the end. The user's words come as separate
    // interim and final streams of one segment, so for them the flag decides.
    const final = finalNow();
    update(text, final === undefined || !mine ? true : final === 'true');
  }

  private changed(): void {
    this.snapshot = [...this.segments.values()];
    for (const l of this.listeners) l();
  }
}
