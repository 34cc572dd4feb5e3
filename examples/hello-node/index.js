// The smallest sless function: a greeting.
exports.handler = async (event) => {
  const name = event.query.name || 'world';
  return `hello, ${name}\n`;
};
