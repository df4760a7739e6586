/* Runs the fuzz harness once over each file named, without libFuzzer, so
 * saved crashes replay with any C compiler.  Usage: replay FILE... */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char *argv[])
{
	for (int i = 1; i < argc; i++) {
		FILE *fp = fopen(argv[i], "rb");
		uint8_t *b = malloc(1 << 20);
		size_t n;

		if (fp == NULL || b == NULL) {
			perror(argv[i]);
			return 2;
		}
		n = fread(b, 1, 1 << 20, fp);
		fclose(fp);
		LLVMFuzzerTestOneInput(b, n);
		free(b);
	}
	return 0;
}
