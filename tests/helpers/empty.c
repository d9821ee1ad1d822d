/* keeps the test helper library non-empty */
