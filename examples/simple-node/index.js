// A JSON function: it adds the numbers it is given and says who called.
exports.handler = async (event, context) => {
  if (event.method !== 'POST') {
    return { statusCode: 405, headers: { Allow: 'POST' }, body: { error: 'POST a JSON object {"numbers": [...]}' } };
  }
  const numbers = (event.json && event.json.numbers) || [];
  if (!Array.isArray(numbers) || numbers.some((n) => typeof n !== 'number')) {
    return { statusCode: 400, body: { error: 'numbers must be an array of numbers' } };
  }
  console.log(`summing ${numbers.length} numbers`);
  return { sum: numbers.reduce((a, b) => a + b, 0), invocation: context.invocationId, trigger: context.trigger };
};
