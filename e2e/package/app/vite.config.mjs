// No React plugin: esbuild's automatic JSX runtime is all a build needs.
export default {
  esbuild: { jsx: 'automatic' },
  logLevel: 'warn',
  build: { outDir: 'dist', emptyOutDir: true },
};
