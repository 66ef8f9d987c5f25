// Confirm before leaving an active session: framework-free, shared by the React hook
// useConfirmLeave() and the demo page. While active, closing or reloading the tab asks the
// browser's own question (`beforeunload`; browsers show their own text, not ours). For an in-app
// back button, confirmLeave() asks with a small modal <dialog> (keyboard: the focus starts on
// "Stay", Escape stays, Enter on a button answers), or window.confirm where <dialog> is missing.

export const DEFAULT_LEAVE_MESSAGE = 'A voice session is running. Leave and end it?';

export interface ConfirmLeaveOptions {
  /** The question shown (default DEFAULT_LEAVE_MESSAGE). */
  message?: string;
  /** The labels of the two buttons (default 'Leave' and 'Stay'). */
  leaveLabel?: string;
  stayLabel?: string;
}

/**
 * Asks the browser to confirm closing or reloading the tab while `isActive()` is true. Returns
 * a function that removes the guard.
 */
export function guardUnload(isActive: () => boolean, message = DEFAULT_LEAVE_MESSAGE): () => void {
  if (typeof window === 'undefined') return () => {};
  const onBeforeUnload = (e: BeforeUnloadEvent) => {
    if (!isActive()) return;
    e.preventDefault();
    // Older browsers want a returnValue; the text is theirs.
    e.returnValue = message;
    return message;
  };
  window.addEventListener('beforeunload', onBeforeUnload);
  return () => window.removeEventListener('beforeunload', onBeforeUnload);
}

/**
 * Asks whether to leave: resolves true for "Leave", false for "Stay" (or Escape). The dialog is
 * removed after the answer and the focus goes back where it was.
 */
export function confirmLeave(options: ConfirmLeaveOptions = {}): Promise<boolean> {
  const message = options.message ?? DEFAULT_LEAVE_MESSAGE;
  if (typeof document === 'undefined') return Promise.resolve(true);
  const dialog = document.createElement('dialog');
  if (typeof (dialog as HTMLDialogElement).showModal !== 'function') {
    return Promise.resolve(typeof window.confirm === 'function' ? window.confirm(message) : true);
  }
  const before = document.activeElement as HTMLElement | null;
  const id = `voice-relay-leave-${Math.random().toString(36).slice(2, 10)}`;
  dialog.className = 'voice-relay-leave';
  dialog.setAttribute('role', 'alertdialog');
  dialog.setAttribute('aria-describedby', id);
  const text = document.createElement('p');
  text.id = id;
  text.textContent = message;
  const leave = document.createElement('button');
  leave.type = 'button';
  leave.textContent = options.leaveLabel ?? 'Leave';
  leave.dataset.answer = 'leave';
  const stay = document.createElement('button');
  stay.type = 'button';
  stay.textContent = options.stayLabel ?? 'Stay';
  stay.dataset.answer = 'stay';
  dialog.setAttribute('aria-label', message);
  dialog.append(text, leave, stay);
  document.body.append(dialog);
  return new Promise<boolean>((resolve) => {
    const answer = (yes: boolean) => {
      if (dialog.open) dialog.close();
      dialog.remove();
      before?.focus?.();
      resolve(yes);
    };
    leave.addEventListener('click', () => answer(true));
    stay.addEventListener('click', () => answer(false));
    dialog.addEventListener('cancel', (e) => {
      e.preventDefault();
      answer(false);
    });
    dialog.showModal();
    stay.focus();
  });
}
